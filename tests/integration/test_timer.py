"""The timer service fires sleeps and retry backoffs through the decider, at the right time."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import asyncpg
import pytest

from orbit_model import compile_definition
from orbit_model.events import TaskFailure
from orbit_model.messages import TaskResult
from orbit_services.decider.service import DeciderService
from orbit_services.store.timers import LISTENER_NAME
from orbit_services.timer import service as timer_module
from orbit_services.timer.service import TimerService

from .conftest import OrbitEnv
from .eventually import eventually
from .rig import Rig, decider_rig

LATE_BY_AT_MOST = 10.0
"""Seconds a timer may fire after its due time here: at once on an idle machine, later
on a loaded one. Never early."""
UNPOLLED_MS = 60_000
"""The safety poll of :func:`unpolled_timer`: only a notification wakes it sooner."""
NOTIFIED_WITHIN = 20.0
"""Seconds for a notified timer service to fire a 300 ms sleep: well under the unpolled
service's 60 s, generous for a loaded machine."""

SLEEPY = compile_definition(
    """
orbit: 1
workflow: sleepy
version: 1.0.0
tasks:
  work: {version: "1"}
steps:
  - id: nap
    sleep: 300ms
  - id: work
    task: work
    retry: {max_attempts: 2, initial_interval: 200ms}
"""
)


@pytest.fixture
async def rig(orbit_env: OrbitEnv) -> AsyncIterator[Rig]:
    async with decider_rig(orbit_env.settings, orbit_env.topology) as rig:
        yield rig


@pytest.fixture
async def timer(orbit_env: OrbitEnv) -> AsyncIterator[TimerService]:
    service = TimerService(orbit_env.settings)
    await service.start()
    try:
        yield service
    finally:
        await service.stop()


async def test_a_sleep_and_a_retry_fire_on_time(rig: Rig, timer: TimerService) -> None:
    await rig.store.register_definition(SLEEPY)
    began = time.monotonic()
    await rig.start(SLEEPY, "s-1", None)
    first = await rig.next_dispatch("work", "1")
    slept = time.monotonic() - began
    assert 0.3 <= slept < 0.3 + LATE_BY_AT_MOST
    failure = TaskFailure(code="FLAKY", message="again")
    failed_at = time.monotonic()
    await rig.send(TaskResult(execution_id="s-1", token=first.token, error=failure))
    second = await rig.next_dispatch("work", "1")
    assert 0.2 <= time.monotonic() - failed_at < 0.2 + LATE_BY_AT_MOST
    assert (second.attempt, second.idempotency_key) == (2, first.idempotency_key)
    await rig.send(TaskResult(execution_id="s-1", token=second.token, output="done"))
    await eventually(lambda: rig.status("s-1"), lambda s: s == "completed")
    assert timer.fired == 2
    assert await rig.database.fetchval("SELECT count(*) FROM timers") == 0


async def test_the_timers_table_follows_the_state(rig: Rig, orbit_env: OrbitEnv) -> None:
    # Without a timer service the sleep's timer waits in the table with its due time.
    await rig.store.register_definition(SLEEPY)
    await rig.start(SLEEPY, "s-2", None)

    async def timers() -> list[tuple[str, int]]:
        rows = await rig.database.fetch("SELECT key, due_at FROM timers WHERE execution_id = 's-2'")
        return [(row["key"], row["due_at"]) for row in rows]

    rows = await eventually(timers, what="the sleep's timer")
    state = await rig.state("s-2")
    assert rows == [("timer:nap", state.unit("nap").due_at)]
    assert isinstance(rig.decider, DeciderService)


@pytest.fixture
async def unpolled_timer(
    orbit_env: OrbitEnv, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[TimerService]:
    """A timer service that polls once a minute: only a NOTIFY wakes it in time."""
    monkeypatch.setattr(timer_module, "SAFETY_POLL_MS", UNPOLLED_MS)
    service = TimerService(orbit_env.settings)
    await service.start()
    try:
        yield service
    finally:
        await service.stop()


async def _sleep_fires_notified(rig: Rig, execution_id: str) -> None:
    """A 300 ms sleep's timer fires, and its next step is dispatched, long before the
    unpolled service would look by itself."""
    await rig.store.register_definition(SLEEPY)
    began = time.monotonic()
    await rig.start(SLEEPY, execution_id, None)
    await rig.next_dispatch("work", "1", timeout=NOTIFIED_WITHIN)
    assert time.monotonic() - began < NOTIFIED_WITHIN


async def test_a_nearer_timer_wakes_the_service_at_once(
    rig: Rig, unpolled_timer: TimerService
) -> None:
    await _sleep_fires_notified(rig, "s-3")


async def test_a_lost_listen_connection_is_opened_again(
    rig: Rig, orbit_env: OrbitEnv, unpolled_timer: TimerService
) -> None:
    killer = await asyncpg.connect(orbit_env.settings.database_url)
    listeners = (
        "SELECT pid FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = $1"
    )
    try:
        [lost] = [row["pid"] for row in await killer.fetch(listeners, LISTENER_NAME)]
        assert await killer.fetchval("SELECT pg_terminate_backend($1)", lost)

        async def listening_again() -> bool:
            pids = [row["pid"] for row in await killer.fetch(listeners, LISTENER_NAME)]
            return len(pids) == 1 and pids[0] != lost

        await eventually(listening_again, what="a new LISTEN connection")
    finally:
        await killer.close()
    # Only a notification on the new connection can wake the service in time.
    await _sleep_fires_notified(rig, "s-4")
