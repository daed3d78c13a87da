"""W1-W4: each starts its executions, waits for them, checks every result and returns figures.

Times: the bench notes ``time.time()`` before its first start; executions'
``created_at`` and ``closed_at`` (and history ``recorded_at``) are Postgres's
``now()`` of the transaction that wrote them, on the same machine's clock.
A check that fails raises ``CheckFailed``, which fails the run.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from bench import procs, workflows
from bench.counters import Counters
from bench.stack import BenchStack
from orbit_sdk import AmqpClient

Say = Callable[[str], None]
POLL_S = 0.25
PROGRESS_S = 3.0


class CheckFailed(Exception):
    """An execution did not complete, or completed with the wrong output."""


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0-100); with 20 samples p99 is the largest."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def _ts(moment: datetime) -> float:
    return moment.timestamp()


async def _publish_starts(
    stack: BenchStack, workflow: str, items: Sequence[tuple[str, Any]]
) -> None:
    """Every start at once: persistent, confirmed AMQP commands, pipelined on one channel."""
    async with AmqpClient(stack.client_settings) as amqp:
        await asyncio.gather(
            *(amqp.publish_start(workflow, inp, execution_id=eid) for eid, inp in items)
        )


async def _wait_closed(
    stack: BenchStack,
    counters: Counters,
    workflow: str,
    prefix: str,
    n: int,
    say: Say,
    label: str,
    timeout: float,
    started: float,
) -> None:
    last_print = time.monotonic()
    deadline = time.monotonic() + timeout
    while True:
        stack.check_alive()
        done = await counters.fetchval(
            "SELECT count(*) FROM executions"
            " WHERE workflow = $1 AND execution_id LIKE $2 AND closed_at IS NOT NULL",
            workflow,
            prefix + "%",
        )
        if done >= n:
            return
        now = time.monotonic()
        if now - last_print >= PROGRESS_S:
            elapsed = time.time() - started
            say(f"  {label}: {done}/{n} closed after {elapsed:.1f} s ({done / elapsed:.0f}/s)")
            last_print = now
        if now > deadline:
            raise CheckFailed(f"{label}: only {done}/{n} executions closed within {timeout:.0f} s")
        await asyncio.sleep(POLL_S)


async def _rows(counters: Counters, workflow: str, prefix: str) -> list[Any]:
    return await counters.fetch(
        "SELECT execution_id, status, output::text AS output, error::text AS error,"
        " created_at, closed_at FROM executions WHERE workflow = $1 AND execution_id LIKE $2",
        workflow,
        prefix + "%",
    )


def _check(rows: Sequence[Any], expected: dict[str, Any], label: str) -> None:
    found = {row["execution_id"]: row for row in rows}
    problems = []
    for eid, want in expected.items():
        row = found.get(eid)
        if row is None:
            problems.append(f"{eid}: missing")
        elif row["status"] != "completed":
            problems.append(f"{eid}: {row['status']} {row['error']}")
        elif json.loads(row["output"]) != want:
            problems.append(f"{eid}: output {row['output']}, expected {json.dumps(want)}")
    if problems:
        shown = "\n  ".join(problems[:10])
        raise CheckFailed(f"{label}: {len(problems)} of {len(expected)} wrong:\n  {shown}")


def _latencies(rows: Sequence[Any]) -> dict[str, float]:
    values = [_ts(r["closed_at"]) - _ts(r["created_at"]) for r in rows]
    return {
        "p50_ms": _ms(percentile(values, 50)),
        "p99_ms": _ms(percentile(values, 99)),
        "max_ms": _ms(max(values)),
    }


async def warm_up(stack: BenchStack, counters: Counters, say: Say) -> None:
    """One execution of each workflow but bench-wait, not measured (imports, caches, queues)."""
    items = {
        "bench-seq3": ({"value": 1}, workflows.expected_sequential(1, workflows.W1_STEPS)),
        "bench-seq10": ({"value": 1}, workflows.expected_sequential(1, workflows.W3_STEPS)),
        "bench-fan-out": (
            {"numbers": workflows.fan_out_input(0)},
            workflows.expected_fan_out(0),
        ),
    }
    started = time.time()
    for workflow, (inp, want) in items.items():
        eid = f"warm-{workflow}"
        await _publish_starts(stack, workflow, [(eid, inp)])
        await _wait_closed(stack, counters, workflow, eid, 1, say, "warm-up", 60, started)
        _check(await _rows(counters, workflow, eid), {eid: want}, "warm-up")
    say(f"warm-up done in {time.time() - started:.1f} s (not measured)")


async def _throughput(
    stack: BenchStack,
    counters: Counters,
    say: Say,
    label: str,
    workflow: str,
    items: list[tuple[str, Any]],
    expected: dict[str, Any],
    steps_per_execution: int,
    timeout: float,
) -> dict[str, Any]:
    n = len(items)
    prefix = f"{label.lower()}-"
    before = await counters.snapshot()
    say(f"{label}: starting {n} executions of {workflow} at once (AMQP publish_start)")
    t0 = time.time()
    await _publish_starts(stack, workflow, items)
    published = time.time()
    say(f"  {label}: {n} starts published and confirmed in {published - t0:.2f} s")
    await _wait_closed(stack, counters, workflow, prefix, n, say, label, timeout, t0)
    rows = await _rows(counters, workflow, prefix)
    _check(rows, expected, label)
    wall = max(_ts(r["closed_at"]) for r in rows) - t0
    after = await counters.snapshot()
    steps = n * steps_per_execution
    say(f"  {label}: all {n} completed and checked; wall {wall:.2f} s")
    return {
        "executions": n,
        "steps_per_execution": steps_per_execution,
        "steps": steps,
        "started_by": "AMQP publish_start, all published concurrently on one channel",
        "publish_s": round(published - t0, 3),
        "wall_s": round(wall, 3),
        "wall_is": "bench's clock before the first publish → the last closed_at",
        "executions_per_s": round(n / wall, 1),
        "steps_per_s": round(steps / wall, 1),
        "latency_created_to_closed": _latencies(rows),
        "cost": counters.delta(before, after, steps, wall),
        "checked": f"{n}/{n} completed with the expected output",
    }


async def w1(stack: BenchStack, counters: Counters, say: Say, n: int) -> dict[str, Any]:
    items = [(f"w1-{i}", {"value": i}) for i in range(n)]
    expected = {
        eid: workflows.expected_sequential(i, workflows.W1_STEPS)
        for i, (eid, _) in enumerate(items)
    }
    return await _throughput(
        stack, counters, say, "W1", "bench-seq3", items, expected, workflows.W1_STEPS, 900
    )


async def w2(stack: BenchStack, counters: Counters, say: Say, n: int) -> dict[str, Any]:
    items = [(f"w2-{i}", {"numbers": workflows.fan_out_input(i)}) for i in range(n)]
    expected = {eid: workflows.expected_fan_out(i) for i, (eid, _) in enumerate(items)}
    result = await _throughput(
        stack, counters, say, "W2", "bench-fan-out", items, expected, workflows.W2_WIDTH + 1, 900
    )
    result["shape"] = f"{workflows.W2_WIDTH} inc units (for, concurrency unbounded) + 1 sum"
    return result


async def w3(stack: BenchStack, counters: Counters, say: Say, runs: int) -> dict[str, Any]:
    """One execution at a time, started over HTTP (POST /v1/executions)."""
    steps = workflows.W3_STEPS
    before = await counters.snapshot()
    say(f"W3: {runs} executions of {steps} sequential steps, one after another (HTTP start+wait)")
    client_e2e: list[float] = []
    round_trips: list[float] = []
    t_first = time.time()
    for run in range(runs):
        eid = f"w3-{run}"
        t0 = time.time()
        started = await stack.client.start(
            "bench-seq10", {"value": run}, execution_id=eid, wait=True, wait_timeout=60
        )
        round_trips.append(time.time() - t0)
        closed = await counters.fetchval(
            "SELECT closed_at FROM executions WHERE execution_id = $1", eid
        )
        if started["execution"].status != "completed" or closed is None:
            stack.check_alive()
            raise CheckFailed(f"W3: {eid} answered {started['execution'].status}")
        client_e2e.append(_ts(closed) - t0)
        if (run + 1) % 5 == 0 or run + 1 == runs:
            say(f"  W3: {run + 1}/{runs} done, last {client_e2e[-1] * 1000:.1f} ms")
    rows = await _rows(counters, "bench-seq10", "w3-")
    _check(rows, {f"w3-{r}": workflows.expected_sequential(r, steps) for r in range(runs)}, "W3")
    wall = time.time() - t_first
    history = await counters.fetch(
        "SELECT execution_id, type, data->>'unit' AS unit, recorded_at FROM history"
        " WHERE execution_id LIKE 'w3-%' AND type IN ('WorkflowCreated', 'StepSucceeded')"
        " ORDER BY execution_id, seq"
    )
    per_step: list[float] = []
    previous: dict[str, float] = {}
    for row in history:
        moment = _ts(row["recorded_at"])
        if row["type"] == "StepSucceeded" and row["execution_id"] in previous:
            per_step.append(moment - previous[row["execution_id"]])
        previous[row["execution_id"]] = moment
    if len(per_step) != runs * steps:
        raise CheckFailed(
            f"W3: {len(per_step)} step intervals in the history, expected {runs * steps}"
        )
    after = await counters.snapshot()
    server_e2e = [_ts(r["closed_at"]) - _ts(r["created_at"]) for r in rows]
    return {
        "runs": runs,
        "steps_per_execution": steps,
        "started_by": "HTTP POST /v1/executions?wait= (OrbitClient.start(..., wait=True)),"
        " one at a time",
        "client_round_trip_ms_per_step": {
            "is": "bench's clock before the request → its answer (the ended execution), / steps",
            "p50": _ms(percentile(round_trips, 50) / steps),
            "p99": _ms(percentile(round_trips, 99) / steps),
        },
        "end_to_end_ms": {
            "is": "bench's clock before the POST → closed_at",
            "p50": _ms(percentile(client_e2e, 50)),
            "p99": _ms(percentile(client_e2e, 99)),
            "max": _ms(max(client_e2e)),
        },
        "created_to_closed_ms": {
            "p50": _ms(percentile(server_e2e, 50)),
            "p99": _ms(percentile(server_e2e, 99)),
        },
        "per_step_ms": {
            "is": "end to end / steps",
            "p50": _ms(percentile(client_e2e, 50) / steps),
            "p99": _ms(percentile(client_e2e, 99) / steps),
        },
        "step_interval_ms": {
            "is": "recorded_at of one step's StepSucceeded → the next's"
            " (first: from WorkflowCreated)",
            "samples": len(per_step),
            "p50": _ms(percentile(per_step, 50)),
            "p99": _ms(percentile(per_step, 99)),
        },
        "cost": counters.delta(before, after, runs * steps, wall),
        "checked": f"{runs}/{runs} completed with the expected output",
    }


def _memory(stack: BenchStack) -> dict[str, dict[str, float | None]]:
    result = {}
    for name, proc in stack.procs.items():
        rss = procs.status_kib(proc.pid, "VmRSS")
        hwm = procs.status_kib(proc.pid, "VmHWM")
        result[name] = {
            "rss_mib": None if rss is None else round(rss / 1024, 1),
            "peak_mib": None if hwm is None else round(hwm / 1024, 1),
        }
    return result


def _services_mib(memory: dict[str, dict[str, float | None]]) -> float:
    return round(sum(m["rss_mib"] or 0 for k, m in memory.items() if k != "worker"), 1)


async def w4(stack: BenchStack, counters: Counters, say: Say, n: int) -> dict[str, Any]:
    memory_before = _memory(stack)
    say(f"W4: starting {n} executions that wait on a signal (AMQP publish_start)")
    t0 = time.time()
    await _publish_starts(stack, "bench-wait", [(f"w4-{i}", {"value": i}) for i in range(n)])
    say(f"  W4: {n} starts published in {time.time() - t0:.1f} s; waiting for them to settle")
    queues = [
        stack.topology.commands,
        *(stack.topology.decider_queue(p) for p in range(stack.partitions)),
    ]
    last_sum = None
    deadline = time.monotonic() + 1800
    while True:
        stack.check_alive()
        row = (
            await counters.fetch(
                "SELECT count(*) AS n, coalesce(sum(last_seq), 0) AS seqs FROM executions"
                " WHERE workflow = 'bench-wait' AND execution_id LIKE 'w4-%'"
            )
        )[0]
        counts = await stack.queue_counts(queues)
        ready = sum(c[0] for c in counts.values())
        if row["n"] == n and ready == 0 and row["seqs"] == last_sum:
            break
        last_sum = row["seqs"] if row["n"] == n else None
        elapsed = time.time() - t0
        say(f"  W4: {row['n']}/{n} created after {elapsed:.1f} s, {ready} messages queued")
        if time.monotonic() > deadline:
            raise CheckFailed(f"W4: only {row['n']}/{n} executions created in time")
        await asyncio.sleep(1.0 if row["n"] == n else PROGRESS_S)
    created = await counters.fetch(
        "SELECT max(created_at) AS last, count(*) FILTER (WHERE closed_at IS NOT NULL) AS closed"
        " FROM executions WHERE workflow = 'bench-wait' AND execution_id LIKE 'w4-%'"
    )
    if created[0]["closed"]:
        raise CheckFailed(f"W4: {created[0]['closed']} executions closed before any signal")
    start_wall = _ts(created[0]["last"]) - t0
    memory_waiting = _memory(stack)
    say(
        f"  W4: {n} waiting; services' RSS {_services_mib(memory_waiting)} MiB"
        f" (before: {_services_mib(memory_before)} MiB)"
    )
    before = await counters.snapshot()
    say(f"  W4: signalling all {n} (AMQP publish_signal)")
    t1 = time.time()
    async with AmqpClient(stack.client_settings) as amqp:
        await asyncio.gather(
            *(amqp.publish_signal(f"w4-{i}", "go", {"value": i}) for i in range(n))
        )
    await _wait_closed(stack, counters, "bench-wait", "w4-", n, say, "W4 signals", 1800, t1)
    rows = await _rows(counters, "bench-wait", "w4-")
    _check(rows, {f"w4-{i}": {"value": i + 1} for i in range(n)}, "W4")
    wall = max(_ts(r["closed_at"]) for r in rows) - t1
    after = await counters.snapshot()
    memory_after = _memory(stack)
    return {
        "executions": n,
        "start_phase": {
            "wall_s": round(start_wall, 2),
            "is": "bench's clock before the first publish → the last created_at",
            "executions_per_s": round(n / start_wall, 1),
        },
        "memory_mib": {
            "before_start": memory_before,
            "all_waiting": memory_waiting,
            "after_signal_phase": memory_after,
            "services_total_waiting": _services_mib(memory_waiting),
            "services_total_before": _services_mib(memory_before),
            "is": "VmRSS (and VmHWM, the peak) of each process from /proc/PID/status",
        },
        "signal_phase": {
            "wall_s": round(wall, 3),
            "is": "bench's clock before the first signal publish → the last closed_at",
            "executions_per_s": round(n / wall, 1),
            "task_steps_per_s": round(n / wall, 1),
            "steps": "per execution: the await unit resolved by the signal + one inc task",
        },
        "cost_signal_phase": counters.delta(before, after, n, wall),
        "checked": f"{n}/{n} completed with the expected output",
    }
