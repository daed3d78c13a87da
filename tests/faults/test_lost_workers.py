"""Workers lost mid-task: killed (the broker hands the task on) or frozen (the session expires).

Either way the attempt is redelivered to another worker with the same
idempotency key and ``redelivery: true``, and the step succeeds once.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from orbit_model.events import StepAttemptUncertain, StepSucceeded
from orbit_sdk import TaskContext, Worker, task
from orbit_services.runtime.settings import Settings
from orbit_services.store import EventStore
from tests.e2e.stack import Stack, running_stack
from tests.integration.conftest import OrbitEnv
from tests.integration.eventually import eventually

from .processes import orbit_process

SLOW = """
orbit: 1
workflow: slow
version: 1.0.0
tasks:
  slow: {version: "1"}
steps:
  - id: hold
    task: slow
"""


@task("slow", version="1")
async def quick(inp: Any, ctx: TaskContext) -> dict[str, Any]:
    return {"worker": "quick", "redelivery": ctx.redelivery, "key": ctx.idempotency_key}


async def _slow_worker(settings: Settings, marker: Path) -> asyncio.subprocess.Process:
    return await orbit_process(
        settings, "worker", "tests.faults.slow_worker:worker", ORBIT_TEST_MARKER=str(marker)
    )


@pytest.fixture
async def stack(orbit_env: OrbitEnv) -> AsyncIterator[Stack]:
    settings = orbit_env.settings_with(session_timeout_ms=1000, heartbeat_interval_ms=200)
    async with running_stack(settings) as stack:
        await stack.client.deploy(SLOW)
        yield stack


async def _run_lost(stack: Stack, tmp_path: Path, lose: signal.Signals) -> dict[str, Any]:
    marker = tmp_path / "started"
    slow = await _slow_worker(stack.settings, marker)
    rescuer: Worker | None = None
    try:
        await eventually(stack.client.workers, lambda w: len(w) == 1, what="the slow worker")
        await stack.client.start("slow", None, execution_id="lost-1")

        async def started() -> bool:
            return marker.exists()

        await eventually(started, timeout=15, what="the slow worker to take the task")
        # Its next heartbeat tells the engine it holds the task.
        await eventually(
            stack.client.workers,
            lambda ws: any(w["worker_id"] != "rescuer" and w["inflight"] == 1 for w in ws),
            what="a heartbeat naming the task",
        )
        rescuer = Worker([quick], worker_id="rescuer", settings=stack.settings)
        await rescuer.start()
        slow.send_signal(lose)
        return await stack.client.wait("lost-1", timeout=20)
    finally:
        if rescuer is not None:
            await rescuer.stop()
        if slow.returncode is None:
            slow.kill()
            await slow.wait()


async def _history(stack: Stack) -> list[Any]:
    store = await EventStore.connect(stack.settings.database_url)
    try:
        return [e.event for e in await store.read_events("lost-1")]
    finally:
        await store.close()


async def test_a_killed_worker_task_goes_to_another_worker(stack: Stack, tmp_path: Path) -> None:
    execution = await _run_lost(stack, tmp_path, signal.SIGKILL)
    assert execution["status"] == "completed"
    assert execution["output"] == {"worker": "quick", "redelivery": True, "key": "lost-1:hold"}
    events = await _history(stack)
    assert Counter(e.unit for e in events if isinstance(e, StepSucceeded)) == {"hold": 1}


async def test_a_frozen_worker_session_expires_and_its_task_is_redelivered(
    stack: Stack, tmp_path: Path
) -> None:
    # SIGSTOP keeps its connection open for a while, so the broker holds the task:
    # the session timeout tells the engine the worker is gone, and the redelivery
    # reaches the rescuer (at the latest once the broker drops the frozen
    # worker's connection for missing AMQP heartbeats).
    execution = await _run_lost(stack, tmp_path, signal.SIGSTOP)
    assert execution["status"] == "completed"
    assert execution["output"] == {"worker": "quick", "redelivery": True, "key": "lost-1:hold"}
    events = await _history(stack)
    uncertain = [e for e in events if isinstance(e, StepAttemptUncertain)]
    assert len(uncertain) == 1
    assert "not heard from" in uncertain[0].reason
    assert Counter(e.unit for e in events if isinstance(e, StepSucceeded)) == {"hold": 1}
