"""The path clients use: HTTP starts, batch starts, ``?wait=`` and W1 started over HTTP.

- **W1H**: W1 (3 sequential ``inc`` steps) started by 16 concurrent callers of
  the ordinary client, each ``OrbitClient.start(..., wait=True)`` (one
  request that starts and waits), as a user would.
- **S1**: single starts, ``POST /v1/executions``, from 32 concurrent
  keep-alive connections; and the same with OrbitClient.
- **S2**: batch starts, ``POST /v1/executions/batch`` of 1,000, two requests
  in flight.
- **L1**: how long after the commit that ends an execution its ``?wait=``
  answers: the bench LISTENs on the same channel as the gateways, so the
  notification's arrival stands for the commit, on the bench's clock.
- **L2**: 10,000 clients waiting at once, each on its own connection: the
  gateway's memory, then every one woken.

S1, S2 and L1, L2 drive the gateway with :class:`RawHttp`, a lean keep-alive
HTTP/1.1 client, so that what is measured is the gateway, not the load
generator's HTTP library (httpx costs more CPU per request than the gateway
does); S1 also reports OrbitClient's figure. S1's and S2's executions wait
for a signal forever: they are started last, and the decider has caught up
with them before the next workload.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import asyncpg

from bench import procs, workflows
from bench.counters import Counters
from bench.stack import BenchStack
from bench.workloads import CheckFailed, Say, percentile
from orbit_sdk import AmqpClient, OrbitClient
from orbit_services.gateway.errors import RETRY_AFTER_SECONDS

HTTP_CLIENTS = 32
W1H_CALLERS = 16
BATCH = 1000
BATCH_IN_FLIGHT = 2
CLOSED_CHANNEL = "orbit_closed"


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": _ms(percentile(values, 50)),
        "p99_ms": _ms(percentile(values, 99)),
        "max_ms": _ms(max(values)),
    }


class RawHttp:
    """One keep-alive HTTP/1.1 connection: a request, then its answer, and again.

    Enough for the gateway's answers (each has a ``content-length``), and
    cheap: the load it generates costs the bench far less CPU than httpx.
    """

    def __init__(self, port: int, token: str | None) -> None:
        self.port = port
        auth = f"authorization: Bearer {token}\r\n" if token else ""
        self._head = f"host: 127.0.0.1:{port}\r\n{auth}".encode()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self._reader, self._writer = await asyncio.open_connection("127.0.0.1", self.port)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def send(self, method: str, path: str, body: Any = None) -> None:
        """Write a request (the answer is read with :meth:`answer`)."""
        assert self._writer is not None
        payload = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        head = f"{method} {path} HTTP/1.1\r\n".encode() + self._head
        if body is not None:
            head += b"content-type: application/json\r\n"
        head += b"content-length: %d\r\n\r\n" % len(payload)
        self._writer.write(head + payload)

    async def answer(self) -> tuple[int, Any]:
        """The status and JSON body of the next answer."""
        assert self._reader is not None
        head = await self._reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        body = await self._reader.readexactly(length) if length else b""
        return status, json.loads(body) if body else None

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        self.send(method, path, body)
        return await self.answer()


async def _connections(stack: BenchStack, n: int, spread: bool = False) -> list[RawHttp]:
    """``n`` open connections to the gateway, or (``spread``) to each gateway in turn."""
    ports = list(stack.gateway_ports.values()) if spread else [stack.http_port]
    connections = [RawHttp(ports[i % len(ports)], stack.token) for i in range(n)]
    for start in range(0, n, 500):  # within the listen backlog
        await asyncio.gather(*(c.open() for c in connections[start : start + 500]))
    return connections


async def _settled(stack: BenchStack, say: Say, label: str) -> None:
    """Until the decider's queues are empty: what was started has been decided."""
    queues = [stack.topology.decider_queue(p) for p in range(stack.partitions)]
    deadline = time.monotonic() + 900
    while True:
        stack.check_alive()
        counts = await stack.queue_counts(queues)
        queued = sum(ready for ready, _consumers in counts.values())
        if queued == 0:
            return
        if time.monotonic() > deadline:
            raise CheckFailed(f"{label}: the decider did not catch up ({queued} queued)")
        say(f"  {label}: the decider catches up, {queued} messages queued")
        await asyncio.sleep(2.0)


async def _count(counters: Counters, prefix: str) -> int:
    return int(
        await counters.fetchval(
            "SELECT count(*) FROM executions WHERE execution_id LIKE $1", prefix + "%"
        )
    )


def _cpu_ms_per(before: Any, after: Any, name: str, n: int) -> float:
    return round((after.cpu[name] - before.cpu[name]) * 1000 / n, 3)


# -- W1 over HTTP ------------------------------------------------------------------


async def w1h(stack: BenchStack, counters: Counters, say: Say, n: int) -> dict[str, Any]:
    """W1 started over HTTP by 16 concurrent callers, each starting and waiting."""
    return await _started_and_waited(
        stack,
        counters,
        say,
        "W1H",
        "bench-seq3",
        [({"value": i}, workflows.expected_sequential(i, workflows.W1_STEPS)) for i in range(n)],
        workflows.W1_STEPS,
    )


async def w2h(stack: BenchStack, counters: Counters, say: Say, n: int) -> dict[str, Any]:
    """W2 (a fan-out of 20 and a sum) started over HTTP the same way."""
    return await _started_and_waited(
        stack,
        counters,
        say,
        "W2H",
        "bench-fan-out",
        [
            ({"numbers": workflows.fan_out_input(i)}, workflows.expected_fan_out(i))
            for i in range(n)
        ],
        workflows.W2_WIDTH + 1,
    )


async def _started_and_waited(
    stack: BenchStack,
    counters: Counters,
    say: Say,
    label: str,
    workflow: str,
    runs: list[tuple[dict[str, Any], dict[str, Any]]],
    steps: int,
) -> dict[str, Any]:
    """Each of ``runs`` (an input, the output it must end with) started by one of
    W1H_CALLERS concurrent callers of ``OrbitClient.start(..., wait=True)``."""
    n = len(runs)
    callers = f"{W1H_CALLERS} callers of OrbitClient.start(wait)"
    say(f"{label}: {n} executions of {steps} steps, {callers}")
    pending = list(range(n))
    wrong: list[str] = []
    answered: list[float] = []
    prefix = label.lower()
    assert stack.token is not None
    async with OrbitClient(stack.client.urls, timeout=60.0, token=stack.token) as client:

        async def caller() -> None:
            while pending:
                i = pending.pop()
                given, want = runs[i]
                t0 = time.monotonic()
                started = await client.start(
                    workflow, given, execution_id=f"{prefix}-{i}", wait=True
                )
                answered.append(time.monotonic() - t0)
                execution = started["execution"]
                if execution.status != "completed" or execution.output != want:
                    wrong.append(f"{prefix}-{i}: {execution.status} {execution.output}")

        before = await counters.snapshot()
        t0 = time.monotonic()
        await asyncio.gather(*(caller() for _ in range(W1H_CALLERS)))
        wall = time.monotonic() - t0
        after = await counters.snapshot()
    if wrong:
        raise CheckFailed(f"{label}: {len(wrong)} of {n} wrong: {wrong[:5]}")
    say(f"  {label}: all {n} completed and checked; wall {wall:.2f} s")
    return {
        "executions": n,
        "steps_per_execution": steps,
        "started_by": f"HTTP: {W1H_CALLERS} concurrent callers of OrbitClient.start(..., wait=True)"
        " (POST /v1/executions?wait=), each starting its next once its last ended",
        "wall_s": round(wall, 3),
        "wall_is": "bench's clock before the first request → the last answer",
        "executions_per_s": round(n / wall, 1),
        "steps_per_s": round(n * steps / wall, 1),
        "client_start_to_answer": _spread(answered),
        "cost": counters.delta(before, after, n * steps, wall),
        "checked": f"{n}/{n} completed with the expected output, as their answers said",
    }


# -- S1: single starts ---------------------------------------------------------------


async def _raw_starts(stack: BenchStack, n: int, prefix: str) -> tuple[float, list[float]]:
    connections = await _connections(stack, HTTP_CLIENTS)
    latencies: list[float] = []
    refused: list[str] = []
    pending = list(range(n))

    async def client(connection: RawHttp) -> None:
        while pending:
            i = pending.pop()
            body = {"workflow": "bench-wait", "execution_id": f"{prefix}{i}", "input": {"value": i}}
            t0 = time.monotonic()
            status, answer = await connection.request("POST", "/v1/executions", body)
            latencies.append(time.monotonic() - t0)
            if status != 201 or not answer.get("created"):
                refused.append(f"{prefix}{i}: {status} {answer}")

    t0 = time.monotonic()
    try:
        await asyncio.gather(*(client(c) for c in connections))
    finally:
        for connection in connections:
            await connection.close()
    wall = time.monotonic() - t0
    if refused:
        raise CheckFailed(f"S1: {len(refused)} starts refused: {refused[:3]}")
    return wall, latencies


async def _client_starts(stack: BenchStack, n: int, prefix: str) -> tuple[float, list[float]]:
    latencies: list[float] = []
    pending = list(range(n))
    async with OrbitClient(stack.client.urls, timeout=60.0, token=stack.token) as orbit:

        async def caller() -> None:
            while pending:
                i = pending.pop()
                t0 = time.monotonic()
                started = await orbit.start("bench-wait", {"value": i}, execution_id=f"{prefix}{i}")
                latencies.append(time.monotonic() - t0)
                if not started["created"]:
                    raise CheckFailed(f"S1: {prefix}{i} was not created")

        t0 = time.monotonic()
        await asyncio.gather(*(caller() for _ in range(HTTP_CLIENTS)))
    return time.monotonic() - t0, latencies


async def s1(stack: BenchStack, counters: Counters, say: Say, n: int) -> dict[str, Any]:
    """Single HTTP starts from 32 keep-alive connections: starts/s and latency."""
    say(f"S1: {n} HTTP starts (POST /v1/executions) from {HTTP_CLIENTS} keep-alive connections")
    before = await counters.snapshot()
    wall, latencies = await _raw_starts(stack, n, "s1-")
    after = await counters.snapshot()
    durable = await _count(counters, "s1-")
    if durable != n:
        raise CheckFailed(f"S1: {durable} executions in Postgres after {n} answered 201")
    say(f"  S1: {n / wall:.0f} starts/s, p99 {percentile(latencies, 99) * 1000:.1f} ms")
    small = max(1, n // 4)
    say(f"  S1: {small} more with OrbitClient (httpx), {HTTP_CLIENTS} concurrent callers")
    client_wall, client_latencies = await _client_starts(stack, small, "s1c-")
    await _settled(stack, say, "S1")
    return {
        "starts": n,
        "clients": f"{HTTP_CLIENTS} keep-alive HTTP/1.1 connections (bench.client_path.RawHttp)",
        "workflow": "bench-wait (each waits for a signal: the decider's share is one turn)",
        "wall_s": round(wall, 3),
        "starts_per_s": round(n / wall, 1),
        "latency": _spread(latencies),
        "durable": f"{durable}/{n} in Postgres; each 201 was answered after its commit",
        "gateway_cpu_ms_per_start": _cpu_ms_per(before, after, "gateway", n),
        "bench_cpu_ms_per_start": _cpu_ms_per(before, after, "bench (this process)", n),
        "cost": counters.delta(before, after, n, wall),
        "with_orbit_client": {
            "starts": small,
            "starts_per_s": round(small / client_wall, 1),
            "latency": _spread(client_latencies),
            "is": f"the same through OrbitClient (httpx), {HTTP_CLIENTS} concurrent callers:"
            " the bench's own CPU bounds it",
        },
    }


# -- S2: batch starts ---------------------------------------------------------------


async def s2(stack: BenchStack, counters: Counters, say: Say, n: int) -> dict[str, Any]:
    """Batch starts of 1,000, two requests in flight: starts/s."""
    say(
        f"S2: {n} starts in batches of {BATCH} (POST /v1/executions/batch),"
        f" {BATCH_IN_FLIGHT} in flight"
    )
    batches = [list(range(start, min(n, start + BATCH))) for start in range(0, n, BATCH)]
    connections = await _connections(stack, BATCH_IN_FLIGHT)
    latencies: list[float] = []
    wrong: list[str] = []

    async def client(connection: RawHttp) -> None:
        while batches:
            batch = batches.pop()
            items = [
                {"workflow": "bench-wait", "execution_id": f"s2-{i}", "input": {"value": i}}
                for i in batch
            ]
            t0 = time.monotonic()
            status, answer = await connection.request(
                "POST", "/v1/executions/batch", {"executions": items}
            )
            latencies.append(time.monotonic() - t0)
            if status != 200:
                wrong.append(f"{status} {answer}")
                continue
            ids = [r["execution_id"] for r in answer["results"] if r.get("created")]
            if ids != [item["execution_id"] for item in items]:
                wrong.append(
                    f"a batch answered {len(ids)} of {len(items)} created, or out of order"
                )

    before = await counters.snapshot()
    t0 = time.monotonic()
    try:
        await asyncio.gather(*(client(c) for c in connections))
    finally:
        for connection in connections:
            await connection.close()
    wall = time.monotonic() - t0
    after = await counters.snapshot()
    if wrong:
        raise CheckFailed(f"S2: {wrong[:3]}")
    durable = await _count(counters, "s2-")
    if durable != n:
        raise CheckFailed(f"S2: {durable} executions in Postgres after {n} were answered")
    say(f"  S2: {n / wall:.0f} starts/s, {BATCH} to a request")
    await _settled(stack, say, "S2")
    return {
        "starts": n,
        "batch": BATCH,
        "requests_in_flight": BATCH_IN_FLIGHT,
        "wall_s": round(wall, 3),
        "starts_per_s": round(n / wall, 1),
        "request_latency": _spread(latencies),
        "durable": f"{durable}/{n} in Postgres, every result created and in order",
        "gateway_cpu_ms_per_start": _cpu_ms_per(before, after, "gateway", n),
        "cost": counters.delta(before, after, n, wall),
    }


# -- L1, L2: waits woken by the ending ----------------------------------------------


class _Endings:
    """The bench's own LISTEN on the gateways' channel: when each ending was announced."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}
        self._connection: asyncpg.Connection | None = None

    async def open(self, url: str) -> None:
        self._connection = await asyncpg.connect(url)
        await self._connection.add_listener(CLOSED_CHANNEL, self._heard)

    def _heard(self, _c: object, _pid: int, _channel: str, payload: object) -> None:
        now = time.monotonic()
        for execution_id in str(payload).split(" "):
            self.at.setdefault(execution_id, now)

    async def close(self) -> None:
        if self._connection is not None:
            await self._connection.close()


async def l1(stack: BenchStack, counters: Counters, say: Say, runs: int) -> dict[str, Any]:
    """One execution at a time, started and waited for in one request: the answer's delay
    after the ending's notification."""
    say(f"L1: {runs} executions of 3 steps, each POST /v1/executions?wait=30, one at a time")
    endings = _Endings()
    await endings.open(stack.settings.database_url)
    [connection] = await _connections(stack, 1)
    delays: list[float] = []
    round_trips: list[float] = []
    try:
        for run in range(runs):
            eid = f"l1-{run}"
            body = {"workflow": "bench-seq3", "execution_id": eid, "input": {"value": run}}
            t0 = time.monotonic()
            status, answer = await connection.request("POST", "/v1/executions?wait=30", body)
            answered = time.monotonic()
            execution = (answer or {}).get("execution") or {}
            want = workflows.expected_sequential(run, workflows.W1_STEPS)
            if (
                status != 201
                or execution.get("status") != "completed"
                or execution.get("output") != want
            ):
                raise CheckFailed(f"L1: {eid} answered {status} {answer}")
            await asyncio.sleep(0.05)  # the notification, should it come after the answer
            heard = endings.at.get(eid)
            if heard is None:
                raise CheckFailed(f"L1: no notification of {eid}'s ending")
            delays.append(answered - heard)
            round_trips.append(answered - t0)
    finally:
        await connection.close()
        await endings.close()
    say(f"  L1: answered {percentile(delays, 50) * 1000:.2f} ms (p50) after the ending's NOTIFY")
    return {
        "runs": runs,
        "answer_after_notify": {
            **_spread(delays),
            "is": "bench's clock: the ending's NOTIFY heard on the bench's own LISTEN"
            " connection → the ?wait answer read; the gateway hears the same NOTIFY",
        },
        "start_to_answer": _spread(round_trips),
        "checked": f"{runs}/{runs} completed, as their answers said",
    }


def _gateways_rss_mib(stack: BenchStack) -> dict[str, float]:
    """Each gateway's RSS."""
    return {
        name: round((procs.status_kib(stack.procs[name].pid, "VmRSS") or 0) / 1024, 1)
        for name in stack.gateway_ports
    }


async def _gateway_waits(stack: BenchStack) -> float:
    """The waits registered, summed over the gateways."""
    return sum([await _waits_at(port) for port in stack.gateway_ports.values()])


async def _waits_at(port: int) -> float:
    for line in (await _metric_text(port)).splitlines():
        if line.startswith("orbit_gateway_waits "):
            return float(line.split()[1])
    raise CheckFailed("L2: the gateway's /metrics has no orbit_gateway_waits")


async def _metric_text(port: int) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nhost: 127.0.0.1:%d\r\nconnection: close\r\n\r\n" % port)
    data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise CheckFailed(f"the gateway's /metrics answered {data[:300]!r}")
    return body.decode()


async def _until(probe: Callable[[], Any], what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not await probe():
        if time.monotonic() > deadline:
            raise CheckFailed(f"L2: {what} did not happen within {timeout:.0f} s")
        await asyncio.sleep(0.5)


async def l2(stack: BenchStack, counters: Counters, say: Say, n: int) -> dict[str, Any]:
    """``n`` clients waiting at once, each on its own connection: memory, then all woken."""
    say(f"L2: {n} executions waiting for a signal, a client waiting on each (?wait=60)")
    items = [
        {"workflow": "bench-wait", "execution_id": f"l2-{i}", "input": {"value": i}}
        for i in range(n)
    ]
    [starter] = await _connections(stack, 1)
    for start in range(0, n, BATCH):
        status, _ = await starter.request(
            "POST", "/v1/executions/batch", {"executions": items[start : start + BATCH]}
        )
        if status != 200:
            raise CheckFailed(f"L2: a batch start answered {status}")
    await starter.close()
    await _settled(stack, say, "L2")
    rss_before = _gateways_rss_mib(stack)
    connections = await _connections(stack, n, spread=True)
    t_open = time.monotonic()
    answered: dict[int, float] = {}
    wrong: list[str] = []
    shed: list[int] = []
    renewed: list[int] = []

    async def read(i: int, connection: RawHttp) -> None:
        path = f"/v1/executions/l2-{i}?wait=60"
        connection.send("GET", path)
        status, answer = await connection.answer()
        while status == 503 or (status == 200 and answer.get("status") == "running"):
            if status == 503:
                # Shed under the burst (the gateway's bound on a wait for Postgres):
                # sent again after its Retry-After, as OrbitClient does.
                shed.append(i)
                await asyncio.sleep(RETRY_AFTER_SECONDS)
            else:  # the wait ran out (ORBIT_MAX_WAIT_SECONDS): waited on again
                renewed.append(i)
            connection.send("GET", path)
            status, answer = await connection.answer()
        answered[i] = time.monotonic()
        if (
            status != 200
            or answer.get("status") != "completed"
            or answer.get("output") != {"value": i + 1}
        ):
            wrong.append(f"l2-{i}: {status} {str(answer)[:200]}")

    readers = [asyncio.ensure_future(read(i, c)) for i, c in enumerate(connections)]

    async def all_waiting() -> bool:
        return await _gateway_waits(stack) >= n

    await _until(all_waiting, f"{n} waits registered")
    registered = time.monotonic() - t_open
    await asyncio.sleep(1.0)
    rss_waiting = _gateways_rss_mib(stack)
    say(f"  L2: {n} waiting; gateways' RSS {rss_before} → {rss_waiting} MiB")
    if shed:
        say(f"  L2: {len(shed)} waits were answered 503 at first and sent again")
    endings = _Endings()
    await endings.open(stack.settings.database_url)
    t_signal = time.monotonic()
    async with AmqpClient(stack.client_settings) as amqp:
        await asyncio.gather(
            *(amqp.publish_signal(f"l2-{i}", "go", {"value": i}) for i in range(n))
        )
    try:
        await asyncio.wait_for(asyncio.gather(*readers), timeout=600)
    finally:
        for connection in connections:
            await connection.close()
        await endings.close()
    if wrong:
        raise CheckFailed(f"L2: {len(wrong)} of {n} wrong: {wrong[:3]}")
    delays = [answered[i] - endings.at[f"l2-{i}"] for i in range(n) if f"l2-{i}" in endings.at]
    if len(delays) != n:
        raise CheckFailed(f"L2: {n - len(delays)} endings were not announced")
    wall = max(answered.values()) - t_signal
    say(f"  L2: all {n} answered in {wall:.1f} s after the signals ({len(renewed)} waited twice)")
    before, waiting = sum(rss_before.values()), sum(rss_waiting.values())
    return {
        "waiting_clients": n,
        "gateways": len(stack.gateway_ports),
        "each": "its own HTTP/1.1 connection, GET /v1/executions/{id}?wait=60, the"
        " connections dealt to the gateways in turn",
        "registered_s": round(registered, 2),
        "shed_and_sent_again": len(shed),
        "waits_renewed": len(renewed),
        "waits_renewed_are": "answered running as their wait ran out, then waited on again",
        "shed_is": "answered 503 with Retry-After during the burst (a wait for Postgres"
        " bounded by ORBIT_POSTGRES_REQUEST_TIMEOUT_SECONDS), then sent again",
        "gateway_rss_mib": {
            "before": round(before, 1),
            "all_waiting": round(waiting, 1),
            "per_gateway_before": rss_before,
            "per_gateway_all_waiting": rss_waiting,
            "per_waiting_client_kib": round((waiting - before) * 1024 / n, 2),
        },
        "signal_to_last_answer_s": round(wall, 2),
        "answer_after_notify": _spread(delays),
        "checked": f"{n}/{n} answered completed with the expected output",
    }
