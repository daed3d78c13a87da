"""Timers for real: retries on time across a timer restart, two replicas, and a SIGKILL.

Every timer must fire once and never early. Firing twice would not show in
a history (the decider takes a second firing as a no-op), so the replicas'
own counters are checked too.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import time
from typing import Any

from orbit_model.events import TimerFired, TimerStarted
from orbit_sdk import TaskContext, TaskError, task
from orbit_services.store import EventStore
from orbit_services.timer.service import TimerService
from tests.database import Database
from tests.e2e.stack import running_stack
from tests.integration.conftest import OrbitEnv
from tests.integration.eventually import eventually

from .processes import orbit_process

SLEEPER = """
orbit: 1
workflow: sleeper
version: 1.0.0
steps:
  - id: nap
    sleep: 1s
"""

FLAKY = """
orbit: 1
workflow: flaky
version: 1.0.0
tasks:
  flaky: {version: "1"}
steps:
  - id: call
    task: flaky
    retry: {max_attempts: 3, initial_interval: 400ms, backoff: 2}
"""

attempts: list[float] = []


@task("flaky", version="1")
async def flaky(inp: Any, ctx: TaskContext) -> str:
    attempts.append(time.monotonic())
    if ctx.attempt < 3:
        raise TaskError("FLAKY", f"attempt {ctx.attempt} fails")
    return "third time lucky"


async def _start_all(stack: Any, workflow: str, ids: list[str]) -> None:
    for start in range(0, len(ids), 100):
        await asyncio.gather(
            *(stack.client.start(workflow, None, execution_id=i) for i in ids[start : start + 100])
        )


async def _completed(store: EventStore, count: int) -> int:
    return len(await store.list_executions(status="completed", limit=count))


async def _check_each_fired_once_on_time(store: EventStore, ids: list[str]) -> None:
    for execution_id in ids:
        stored = await store.read_events(execution_id)
        fired = [e for e in stored if isinstance(e.event, TimerFired)]
        assert len(fired) == 1, execution_id
        started = next(e.event for e in stored if isinstance(e.event, TimerStarted))
        assert fired[0].recorded_at.timestamp() * 1000 >= started.due_at - 5  # never early


async def test_retries_back_off_on_time_across_a_timer_restart(orbit_env: OrbitEnv) -> None:
    attempts.clear()
    async with running_stack(
        orbit_env.settings, [flaky], services=("decider", "dispatcher", "gateway")
    ) as stack:
        await stack.client.deploy(FLAKY)
        timer = TimerService(stack.settings)
        await timer.start()
        await stack.client.start("flaky", None, execution_id="f-1")
        await eventually(_count, lambda n: n >= 1, what="the first attempt")
        # The timer service goes away while the first backoff runs, and comes back.
        await timer.stop()
        timer = TimerService(stack.settings)
        await timer.start()
        try:
            execution = await stack.client.wait("f-1", timeout=20)
        finally:
            await timer.stop()
    assert execution["output"] == "third time lucky"
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert len(gaps) == 2
    assert 0.4 <= gaps[0] < 1.2  # 400 ms
    assert 0.8 <= gaps[1] < 1.6  # 400 ms x 2


async def _count() -> int:
    return len(attempts)


async def test_a_thousand_sleeps_with_two_timer_replicas_fire_once_each(
    orbit_env: OrbitEnv,
) -> None:
    ids = [f"z-{n}" for n in range(1000)]
    async with running_stack(orbit_env.settings) as stack:
        second = TimerService(stack.settings)
        await second.start()
        store = await EventStore.connect(stack.settings.database_url)
        try:
            await stack.client.deploy(SLEEPER)
            await _start_all(stack, "sleeper", ids)
            await eventually(
                lambda: _completed(store, len(ids)),
                lambda n: n == len(ids),
                timeout=60,
                what="every sleeper",
            )
            first = stack.services["timer"]
            assert isinstance(first, TimerService)
            assert first.fired + second.fired == len(ids)
            assert first.fired > 0
            assert second.fired > 0
            await _check_each_fired_once_on_time(store, ids)
        finally:
            await second.stop()
            await store.close()


async def test_a_killed_timer_service_fires_each_pending_timer_once(orbit_env: OrbitEnv) -> None:
    ids = [f"k-{n}" for n in range(1000)]
    settings = orbit_env.settings
    store = await EventStore.connect(settings.database_url)
    timer: asyncio.subprocess.Process | None = None
    try:
        async with running_stack(settings, services=("decider", "dispatcher", "gateway")) as stack:
            await stack.client.deploy(SLEEPER.replace("sleep: 1s", "sleep: 4s"))
            await _start_all(stack, "sleeper", ids)

            async def pending() -> int:
                return int(
                    await Database(settings.database_url).fetchval("SELECT count(*) FROM timers")
                )

            # No timer service yet: all 1,000 timers wait in the table.
            await eventually(pending, lambda n: n == len(ids), timeout=30, what="every timer")
            timer = await orbit_process(settings, "service", "timer")
            # Killed in the middle of firing them.
            await eventually(
                lambda: _completed(store, len(ids)), lambda n: n > 0, what="a first firing"
            )
            timer.send_signal(signal.SIGKILL)
            await timer.wait()
            assert await pending() > 0
            timer = await orbit_process(settings, "service", "timer")
            await eventually(
                lambda: _completed(store, len(ids)),
                lambda n: n == len(ids),
                timeout=60,
                what="every sleeper",
            )
        await _check_each_fired_once_on_time(store, ids)
    finally:
        if timer is not None and timer.returncode is None:
            timer.send_signal(signal.SIGTERM)
            await timer.wait()
        await store.close()
