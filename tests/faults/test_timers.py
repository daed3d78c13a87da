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

import pytest

from orbit_model.events import TimerFired, TimerStarted
from orbit_model.views import view_json
from orbit_sdk import TaskContext, TaskError, task
from orbit_services.store import EventStore
from orbit_services.store.timers import LISTENER_NAME
from orbit_services.timer.service import TimerService
from tests.database import Database
from tests.e2e.stack import running_stack
from tests.integration.conftest import OrbitEnv
from tests.integration.eventually import eventually

from .processes import orbit_process

LATE_BY_AT_MOST = 10.0
"""Seconds a timer may fire after its due time here: at once on an idle machine (a
written timer is announced; the safety poll is 1 s), later on a loaded one. Never early."""
START_WITHIN = 120.0
"""Seconds for a timer service process to start: Python's start takes seconds on a
loaded machine; only one that never comes waits this long."""
ALL_DONE_WITHIN = 300.0
"""Seconds for 1,000 sleepers to complete once their timers can fire: about 15 s on
an idle machine; generous, for a loaded one."""

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
            execution = view_json(await stack.client.wait("f-1", timeout=60))
        finally:
            await timer.stop()
    assert execution["output"] == "third time lucky"
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert len(gaps) == 2
    assert 0.4 <= gaps[0] < 0.4 + LATE_BY_AT_MOST  # 400 ms
    assert 0.8 <= gaps[1] < 0.8 + LATE_BY_AT_MOST  # 400 ms x 2


async def _count() -> int:
    return len(attempts)


@pytest.mark.timeout(600)  # generous: only a failing run comes near it
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
                timeout=ALL_DONE_WITHIN,
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


EARLY_SECONDS = 4
LATE_SECONDS = 20
"""The killed timer test's two sleeps: half its timers are due soon after their start,
half long after. The timer service is killed once it has fired a first one: the late
half is then certainly still pending, however slow the machine is to notice."""


@pytest.mark.timeout(900)  # generous: only a failing run comes near it
async def test_a_killed_timer_service_fires_each_pending_timer_once(orbit_env: OrbitEnv) -> None:
    early = [f"k-{n}" for n in range(500)]
    late = [f"k-{n}" for n in range(500, 1000)]
    ids = early + late
    settings = orbit_env.settings
    store = await EventStore.connect(settings.database_url)
    database = Database(settings.database_url)
    timer: asyncio.subprocess.Process | None = None

    async def pending() -> int:
        return int(await database.fetchval("SELECT count(*) FROM timers"))

    async def timer_listening() -> bool:
        listening = await database.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = $1",
            LISTENER_NAME,
        )
        return bool(listening)

    try:
        async with running_stack(settings, services=("decider", "dispatcher", "gateway")) as stack:
            await stack.client.deploy(
                SLEEPER.replace("sleeper", "early").replace("1s", f"{EARLY_SECONDS}s"),
                SLEEPER.replace("sleeper", "late").replace("1s", f"{LATE_SECONDS}s"),
            )
            timer = await orbit_process(settings, "service", "timer")
            await eventually(timer_listening, timeout=START_WITHIN, what="the timer service up")
            await _start_all(stack, "early", early)
            await _start_all(stack, "late", late)
            # Killed in the middle of firing them: once the first early one fired.
            await eventually(
                lambda: _completed(store, len(ids)),
                lambda n: n > 0,
                timeout=START_WITHIN,
                what="a first firing",
            )
            timer.send_signal(signal.SIGKILL)
            await timer.wait()
            left = await pending()
            assert left > 0
            timer = await orbit_process(settings, "service", "timer")
            await eventually(
                lambda: _completed(store, len(ids)),
                lambda n: n == len(ids),
                timeout=ALL_DONE_WITHIN,
                what="every sleeper",
            )
        print(f"the timer service was killed with {left} of {len(ids)} timers pending")
        await _check_each_fired_once_on_time(store, ids)
    finally:
        if timer is not None and timer.returncode is None:
            timer.send_signal(signal.SIGTERM)
            await timer.wait()
        await store.close()
