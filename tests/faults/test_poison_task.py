"""A poison task (its worker crashes on every delivery) fails its attempt; it never hangs.

Worker processes that crash on the task (``os._exit`` right after a heartbeat
naming it) are started again and again, three at a time, the way a process
supervisor would. RabbitMQ redelivers the task message to each in turn until
its queue's delivery limit parks it; the dispatcher reads the parked copy and
fails the attempt with ``DELIVERY_LIMIT_EXCEEDED``, naming the delivery count
and the last worker that held it. The step's retry policy then applies: the
retry runs on a healthy worker and the execution completes. A sink outside
Orbit counts every run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from orbit_model.events import RetryScheduled, StepAttemptFailed
from orbit_model.outcome_codes import OutcomeCode
from orbit_model.topology import DELIVERY_LIMIT
from orbit_model.views import view_json
from orbit_sdk import TaskContext, Worker, task
from orbit_services.store import EventStore
from tests.e2e.stack import Stack, running_stack
from tests.integration.conftest import OrbitEnv

from .processes import orbit_process
from .sink import Sink

CRASHERS = 3
"""Crashing worker processes at a time (each started again once it dies)."""
PARKED_WITHIN = 400.0
"""Seconds for the task to be parked: each of its deliveries takes a worker process's
start (Python's, seconds on a loaded machine); only a task never parked waits this long."""

POISONED = """
orbit: 1
workflow: poisoned
version: 1.0.0
tasks:
  poison: {version: "1"}
steps:
  - id: bad
    task: poison
    retry: {max_attempts: 2, initial_interval: 100ms}
"""


@pytest.fixture
async def stack(orbit_env: OrbitEnv) -> AsyncIterator[Stack]:
    # Sessions outlive the test: the crashed ones never expire into redeliveries.
    settings = orbit_env.settings_with(session_timeout_ms=120_000)
    async with running_stack(settings) as stack:
        await stack.client.deploy(POISONED)
        yield stack


async def _crash_loop(stack: Stack, sink: Sink, marker: Path, stop: asyncio.Event) -> int:
    """Keep one crashing worker process up until ``stop``; how many were started."""
    started = 0
    while not stop.is_set():
        process = await orbit_process(
            stack.settings,
            "worker",
            "tests.faults.sink_worker:worker",
            ORBIT_TEST_SINK=str(sink.path),
            ORBIT_TEST_MARKER=str(marker),
        )
        started += 1
        exited = asyncio.ensure_future(process.wait())
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({exited, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if process.returncode is None:
            process.kill()
        await exited
    return started


async def _history(stack: Stack, execution_id: str) -> list[Any]:
    store = await EventStore.connect(stack.settings.database_url)
    try:
        return [e.event for e in await store.read_events(execution_id)]
    finally:
        await store.close()


@task("poison", version="1")
async def cured(inp: Any, ctx: TaskContext) -> dict[str, Any]:
    return {"attempt": ctx.attempt}


@pytest.mark.timeout(600)  # generous: only a failing run comes near it
async def test_a_poison_task_fails_its_attempt_and_the_retry_goes_on(
    stack: Stack, tmp_path: Path
) -> None:
    sink = Sink(tmp_path / "sink")
    stop = asyncio.Event()
    loops = [
        asyncio.create_task(_crash_loop(stack, sink, tmp_path / f"marker-{n}", stop))
        for n in range(CRASHERS)
    ]
    began = time.monotonic()
    try:
        await stack.client.start("poisoned", None, execution_id="poison-1")

        async def parked() -> list[StepAttemptFailed]:
            events = await _history(stack, "poison-1")
            return [e for e in events if isinstance(e, StepAttemptFailed)]

        # 21 worker processes start and crash in turn: about 30 s on a loaded machine.
        deadline = time.monotonic() + PARKED_WITHIN
        while not (failed := await parked()):
            assert time.monotonic() < deadline, f"never parked; runs so far: {len(sink.runs())}"
            await asyncio.sleep(0.2)
        took = time.monotonic() - began
    finally:
        stop.set()
        processes = sum(await asyncio.gather(*loops))
    # The first delivery (its token has a MAC after a dot: attempts.delivery_token).
    first_attempt = [run for run in sink.runs() if run.token.startswith("poison-1:bad:1.")]
    print(
        f"poison: attempt 1 ran {len(first_attempt)} times in {processes} worker processes"
        f" and failed after {took:.1f} s: {failed[0].error.message}"
    )
    [attempt] = failed
    error = attempt.error
    assert error.code == OutcomeCode.DELIVERY_LIMIT_EXCEEDED
    assert error.retryable
    assert error.details is not None
    assert error.details["delivery_count"] == DELIVERY_LIMIT + 1
    # Every delivery crashed a worker; the last one's heartbeat named the task.
    assert len(first_attempt) == DELIVERY_LIMIT + 1
    assert attempt.worker_id == first_attempt[-1].who
    assert error.details["worker_id"] == first_attempt[-1].who

    # The retry policy goes on: attempt 2 runs on a healthy worker.
    healthy = Worker([cured], worker_id="healthy", settings=stack.settings)
    await healthy.start()
    try:
        done = view_json(await stack.client.wait("poison-1", timeout=120))
    finally:
        with contextlib.suppress(Exception):
            await healthy.stop()
    assert done["status"] == "completed", done
    assert done["steps"]["bad"]["attempt"] == 2
    assert done["steps"]["bad"]["error"] is None
    events = await _history(stack, "poison-1")
    assert sum(isinstance(e, RetryScheduled) for e in events) == 1
