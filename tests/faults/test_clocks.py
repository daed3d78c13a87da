"""Skewed clocks: no timer fires early, no firing storm, no healthy task failed.

A chaos run (issue 32, items 5 and 6) skewed hosts' clocks with libfaketime:

- a timer replica 60 s ahead fired all 100 ``sleep: 20s`` timers 5 s early, and the
  ``timers`` table took 24,677 writes for 100 timers; a decider 30 s behind did the
  same (16,773 writes for 50): due times came from the decider's clock, firings from
  the timer's, and the decider believed a firing up to 5 s ahead of its own;
- a worker 60 s behind, heartbeating every second on steps with
  ``heartbeat_timeout: 5s``, completed none of 8: each failed ``HEARTBEAT_TIMEOUT``
  and ran twice, since its ``heartbeat_at`` was compared with the decider's clock.

Here the decider runs 30 s behind, the timer service 60 s ahead and the worker 60 s
behind, each a process of its own under Debian's libfaketime (``apt-get install
faketime``); the gateway and the dispatcher run in the test. Every time is read on
Postgres's clock now (``runtime.clock``): each sleep ends at or after its due time by
Postgres's clock, each timer is written at most twice, and every heartbeating task
completes, run once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from orbit_model.events import StepSucceeded, TimerStarted
from orbit_services.store import EventStore
from tests.database import Database
from tests.e2e.stack import Stack, running_stack
from tests.integration.conftest import OrbitEnv
from tests.integration.eventually import eventually
from tests.views import as_sent

from .processes import orbit_process, stop_processes
from .sink import Sink

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
SLEEPS = 20
PULSES = 4
COMPLETE_WITHIN = 180.0
"""Seconds for every execution to end: about ten on an idle machine."""
NAP_MS = 3_000
"""The sleeper's ``sleep``."""
EARLY_TOLERANCE_MS = 200
"""How much earlier than its due time, by Postgres's clock, a firing may be recorded:
the error of a clock read through a round trip, well under the 5 s seen before."""

SLEEPER = """
orbit: 1
workflow: sleeper
version: 1.0.0
steps:
  - id: nap
    sleep: 3s
"""
PULSING = """
orbit: 1
workflow: pulsing
version: 1.0.0
tasks:
  pulse: {version: "1"}
steps:
  - id: beat
    task: pulse
    input: {seconds: 8}
    heartbeat_timeout: 5s
    retry: {max_attempts: 1}
"""


def _skewed(offset: str) -> dict[str, str]:
    """libfaketime's environment for a process whose wall clock is ``offset`` away;
    its monotonic clock, which no skew touches on a real host, is left alone."""
    if not LIBFAKETIME.exists():
        pytest.fail(f"no libfaketime at {LIBFAKETIME}: apt-get install faketime")
    return {
        "LD_PRELOAD": str(LIBFAKETIME),
        "FAKETIME": offset,
        "DONT_FAKE_MONOTONIC": "1",
    }


@pytest.fixture
async def skewed_stack(orbit_env: OrbitEnv, tmp_path: Path) -> AsyncIterator[tuple[Stack, Sink]]:
    settings = orbit_env.settings_with(heartbeat_interval_ms=500)
    sink = Sink(tmp_path / "sink")
    processes: list[asyncio.subprocess.Process] = []
    async with running_stack(settings, services=("gateway", "dispatcher")) as stack:
        try:
            environment = {"ORBIT_TEST_SINK": str(sink.path)}
            processes += [
                await orbit_process(stack.settings, "service", "decider", **_skewed("-30s")),
                await orbit_process(stack.settings, "service", "timer", **_skewed("+60s")),
                await orbit_process(
                    stack.settings,
                    "worker",
                    "tests.faults.clock_worker:worker",
                    **environment,
                    **_skewed("-60s"),
                ),
            ]
            await stack.client.deploy(SLEEPER, PULSING)
            yield stack, sink
        finally:
            await stop_processes(*processes)


async def _timer_writes(database: Database) -> int:
    """Rows written to ``timers`` so far (inserts and upserts' updates), as Postgres's
    statistics say once the writers' pending counts are flushed."""
    await asyncio.sleep(1.5)  # a backend flushes its counts within a second of idling
    value = await database.fetchval(
        "SELECT coalesce(sum(n_tup_ins + n_tup_upd), 0) FROM pg_stat_user_tables"
        " WHERE relname = 'timers'"
    )
    return int(value)


@pytest.mark.timeout(600)  # generous: only a failing run comes near it
async def test_skewed_clocks_fire_no_timer_early_and_fail_no_healthy_task(
    skewed_stack: tuple[Stack, Sink],
) -> None:
    stack, sink = skewed_stack
    client = stack.client
    database = Database(stack.settings.database_url)
    writes_before = await _timer_writes(database)
    sleeps = [f"sleep-{n}" for n in range(SLEEPS)]
    pulses = [f"pulse-{n}" for n in range(PULSES)]
    for execution_id in sleeps:
        await client.start("sleeper", None, execution_id=execution_id)
    for execution_id in pulses:
        await client.start("pulsing", None, execution_id=execution_id)
    ended = await asyncio.gather(
        *(as_sent(client.wait(i, timeout=COMPLETE_WITHIN)) for i in (*sleeps, *pulses))
    )
    assert [e["status"] for e in ended] == ["completed"] * (SLEEPS + PULSES), [
        (e["execution_id"], e["status"], e.get("error")) for e in ended
    ]
    # Each sleep lasted its 3 s at least, by Postgres's clock (the times its TimerStarted
    # and its StepSucceeded were recorded), whoever computed its due time.
    early: list[tuple[str, int]] = []
    store = await EventStore.connect(stack.settings.database_url, min_size=1, max_size=1)
    try:
        for execution_id in sleeps:
            stored = await store.read_events(execution_id)
            [started_at] = [
                s.recorded_at.timestamp() * 1000
                for s in stored
                if isinstance(s.event, TimerStarted) and s.event.unit == "nap"
            ]
            [ended_at] = [
                s.recorded_at.timestamp() * 1000
                for s in stored
                if isinstance(s.event, StepSucceeded) and s.event.unit == "nap"
            ]
            slept = ended_at - started_at
            if slept < NAP_MS - EARLY_TOLERANCE_MS:
                early.append((execution_id, int(NAP_MS - slept)))
    finally:
        await store.close()
    assert not early, f"fired early (ms): {early}"
    writes = await _timer_writes(database) - writes_before
    print(f"{SLEEPS} sleeps and {PULSES} heartbeating tasks: {writes} timer writes")
    # A sleep's timer, and each pulse's heartbeat deadline moved once a check at most:
    # far from the storms of thousands.
    assert writes <= 2 * SLEEPS + 4 * PULSES, writes
    # Every heartbeating task ran once: none was failed as silent, nor run again.
    await eventually(lambda: _counts(sink), lambda c: len(c) == PULSES, timeout=30)
    assert set((await _counts(sink)).values()) == {1}


async def _counts(sink: Sink) -> dict[str, int]:
    return dict(sink.counts())
