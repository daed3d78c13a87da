"""Every service replicated, and one replica of each kind SIGKILLed under load.

Each service runs as processes of its own: 2 gateways, 3 deciders, 2
dispatchers, 2 timer services and 2 workers, on 32 decider partitions. 300
executions (a task, a durable sleep, a task) are started through the
gateways while, in turn, a gateway, a decider, a dispatcher and a timer
service are killed with SIGKILL, each once the load has moved on since the
last kill. The client is given both gateways and moves on when one is gone.

Every execution completes with the right output; no step is dispatched or
succeeds twice; every history's seqs are 1..n without a gap. A task that
ran twice may only be one delivery delivered again (a decider killed between
publishing a task and deleting its outbox row publishes it once more), never
a second dispatch.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from orbit_model.events import StepDispatched, StepSucceeded, WorkflowCompleted
from orbit_sdk.client import OrbitClient
from orbit_services.runtime.settings import Settings
from orbit_services.store import EventStore
from tests.e2e.stack import free_port
from tests.integration.conftest import OrbitEnv
from tests.integration.eventually import eventually

from .processes import orbit_process
from .sink import Sink

EXECUTIONS = 300
WAVES = 10
PARTITIONS = 32
START_WITHIN = 120.0
"""Seconds for eleven processes to start: Python's start takes seconds each on a
loaded machine; only a process that never comes waits this long."""
PROGRESS_WITHIN = 120.0
"""Seconds for work to go on after a kill: a killed decider's partitions wait for its
lease (10 s), the rest is quick; generous, for a loaded machine."""
DONE_WITHIN = 300.0
"""Seconds for every execution to complete: about 20 s measured on an idle machine."""

HOPS = """
orbit: 1
workflow: hops
version: 1.0.0
tasks:
  hop: {version: "1"}
steps:
  - id: first
    task: hop
    input: {n: "${ input.n }"}
  - id: pause
    sleep: 300ms
  - id: second
    task: hop
    input: {n: "${ steps.first.output.n }"}
output:
  n: ${ steps.second.output.n }
"""

Process = asyncio.subprocess.Process


class Replicas:
    """The processes of every service, by kind, so that one of a kind can be killed."""

    def __init__(self, settings: Settings, sink: Sink) -> None:
        self.settings = settings
        self.sink = sink
        self.ports = [free_port(), free_port()]
        self.running: dict[str, list[Process]] = defaultdict(list)

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for port in self.ports]

    async def start(self) -> None:
        for port in self.ports:
            await self._spawn("gateway", ORBIT_HTTP_PORT=str(port), ORBIT_AUTH="disabled")
        for kind, count in (("decider", 3), ("dispatcher", 2), ("timer", 2)):
            for _ in range(count):
                await self._spawn(kind)

    async def start_workers(self) -> None:
        """Once the services made the namespace: a worker needs its exchanges."""
        for _ in range(2):
            process = await orbit_process(
                self.settings,
                "worker",
                "tests.faults.load_worker:worker",
                ORBIT_TEST_SINK=str(self.sink.path),
            )
            self.running["worker"].append(process)

    async def _spawn(self, kind: str, **extra: str) -> None:
        process = await orbit_process(self.settings, "service", kind, **extra)
        self.running[kind].append(process)

    async def kill_one(self, kind: str) -> None:
        process = self.running[kind].pop(0)
        process.send_signal(signal.SIGKILL)
        await process.wait()

    async def stop(self) -> None:
        # Workers first: they unregister through a dispatcher.
        await _terminate(self.running.pop("worker", []))
        await _terminate([p for processes in self.running.values() for p in processes])


async def _terminate(processes: list[Process]) -> None:
    for process in processes:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            await asyncio.wait_for(process.wait(), timeout=15)
        except TimeoutError:
            process.kill()
            await process.wait()


@contextlib.asynccontextmanager
async def replicas(settings: Settings, sink: Sink) -> AsyncIterator[Replicas]:
    running = Replicas(settings, sink)
    try:
        await running.start()
        yield running
    finally:
        await running.stop()


async def _gateways_up(urls: list[str]) -> bool:
    async with httpx.AsyncClient(timeout=2) as http:
        for url in urls:
            try:
                if (await http.get(f"{url}/readyz")).status_code != 200:
                    return False
            except httpx.HTTPError:
                return False
    return True


async def _completed(store: EventStore) -> int:
    return len(await store.list_executions(status="completed", limit=EXECUTIONS))


@pytest.mark.timeout(900)  # generous: only a failing run comes near it
async def test_one_replica_of_each_kind_killed_under_load(
    orbit_env: OrbitEnv, tmp_path: Path
) -> None:
    settings = orbit_env.settings_with(decider_partitions=PARTITIONS)
    sink = Sink(tmp_path / "sink")
    store = await EventStore.connect(settings.database_url)
    try:
        async with replicas(settings, sink) as running:
            client = OrbitClient(running.urls, timeout=60)  # a busy machine answers slowly
            try:
                await eventually(
                    lambda: _gateways_up(running.urls), timeout=START_WITHIN, what="both gateways"
                )
                await client.deploy(HOPS)
                await running.start_workers()
                await eventually(
                    client.workers, lambda w: len(w) == 2, timeout=START_WITHIN, what="both workers"
                )
                await eventually(
                    client.deciders,
                    lambda d: d["balanced"] and len(d["deciders"]) == 3,
                    timeout=START_WITHIN,
                    what="three deciders sharing the partitions",
                )
                # Kill one of a kind after these waves of starts; the load goes on meanwhile.
                kills = {2: "gateway", 4: "decider", 6: "dispatcher", 8: "timer"}
                ids = [f"load-{n}" for n in range(EXECUTIONS)]
                per_wave = EXECUTIONS // WAVES
                started = time.monotonic()
                for wave in range(WAVES):
                    chunk = ids[wave * per_wave : (wave + 1) * per_wave]
                    await asyncio.gather(
                        *(client.start("hops", {"n": 1}, execution_id=i) for i in chunk)
                    )
                    if wave in kills:
                        before = await _completed(store)
                        await running.kill_one(kills[wave])
                        # Under load: the next kill waits until work went on after this one.
                        await eventually(
                            lambda: _completed(store),
                            lambda n, before=before: n > before,
                            timeout=PROGRESS_WITHIN,
                            what=f"progress after a {kills[wave]} was killed",
                        )
                await eventually(
                    lambda: _completed(store),
                    lambda n: n == EXECUTIONS,
                    timeout=DONE_WITHIN,
                    interval=0.2,
                    what="every execution completing",
                )
                print(f"{EXECUTIONS} executions in {time.monotonic() - started:.1f} s")
            finally:
                await client.close()
        await _check_histories(store, ids, sink)
    finally:
        await store.close()


async def _check_histories(store: EventStore, ids: list[str], sink: Sink) -> None:
    for execution_id in ids:
        stored = await store.read_events(execution_id)
        assert [e.seq for e in stored] == list(range(1, len(stored) + 1)), execution_id
        events = [e.event for e in stored]
        dispatched = Counter(e.unit for e in events if isinstance(e, StepDispatched))
        succeeded = Counter(e.unit for e in events if isinstance(e, StepSucceeded))
        assert dispatched == {"first": 1, "second": 1}, (execution_id, dispatched)
        assert succeeded == {"first": 1, "pause": 1, "second": 1}, (execution_id, succeeded)
        (completed,) = [e for e in events if isinstance(e, WorkflowCompleted)]
        assert completed.output == {"n": 3}
    tokens: dict[str, set[str]] = defaultdict(set)
    for run in sink.runs():
        tokens[run.key].add(run.token)
    assert len(tokens) == 2 * len(ids)
    twice = {key: found for key, found in tokens.items() if len(found) > 1}
    assert twice == {}, f"units dispatched to workers more than once: {twice}"
    redelivered = sum(count - 1 for count in sink.counts().values())
    print(f"tasks delivered again (one dispatch, delivered twice): {redelivered}")
