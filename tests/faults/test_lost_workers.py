"""Workers lost mid-task run it at most twice: the interrupted run and one more.

A sink outside Orbit (:mod:`tests.faults.sink`) counts the runs of the unit
in every process. A worker process takes a task and holds it; a second worker
(in the test's process, whose run lasts until the engine has expired the lost
worker's session) is ready to take it over. Then the first one is

- **killed** (SIGKILL): RabbitMQ hands the task to the rescuer at once, as a
  redelivery of the same token. When the dead session expires, the engine must
  not dispatch the unit again, since an open session holds it: 2 runs;
- **frozen** (SIGSTOP): usually its session expires first, so the engine
  dispatches the unit again under a new token and the rescuer runs that; once
  RabbitMQ drops the frozen connection it requeues the original delivery, which
  the rescuer must skip (the engine has moved on). On a busy machine RabbitMQ
  may drop the connection first: then the rescuer runs the original delivery's
  redelivery, as after a kill, and the expiry dispatches nothing more. Either
  way the zombie then wakes (SIGCONT) and finishes its run, and its late result
  is recorded as ``StaleResultIgnored``: 2 runs.

Either way every run has the same idempotency key and the step succeeds once.

The rescuer's run ends only once the session has expired, and the run counts are
read once the task queue holds nothing ready or unacknowledged (any requeued
delivery was taken and skipped). Which of RabbitMQ's drop and the session's expiry
comes first is the machine's to say: the frozen worker's AMQP heartbeats make the
expiry come first on an idle machine, but beside a CPU stress two CI runs saw the
drop first (the expiry waits for a dispatcher seen lately), and both orders are
right.
"""

from __future__ import annotations

import asyncio
import signal
import socket
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from orbit_model.events import (
    StaleResultIgnored,
    StepAttemptUncertain,
    StepDispatched,
    StepSucceeded,
)
from orbit_model.views import view_json
from orbit_sdk import TaskContext, Worker, task
from orbit_services.store import EventStore
from tests.database import Database
from tests.e2e.stack import Stack, running_stack
from tests.integration.conftest import OrbitEnv
from tests.integration.eventually import eventually
from tests.rabbitmq_queues import queue_counts

from .processes import orbit_process
from .sink import Sink

SESSION_TIMEOUT_MS = 1000
FROZEN_HEARTBEAT_SECONDS = 20
"""The held worker's AMQP heartbeat: RabbitMQ drops a frozen connection after two
missed, about 40 s, usually well after its session (1 s) has expired."""
SETTLE_WITHIN = 120.0
"""Seconds for an expiry, or a redelivery dropped by RabbitMQ, to happen: a few on an
idle machine; generous, for a loaded one."""

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


@pytest.fixture
async def stack(orbit_env: OrbitEnv) -> AsyncIterator[Stack]:
    settings = orbit_env.settings_with(
        session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=200
    )
    async with running_stack(settings) as stack:
        await stack.client.deploy(SLOW)
        yield stack


def _rescuer(sink: Sink, expired: Any) -> Any:
    @task("slow", version="1")
    async def slow(inp: Any, ctx: TaskContext) -> dict[str, Any]:
        sink.record(ctx.idempotency_key, ctx.token, "rescuer")
        # The lost worker's session expires while this run holds the task.
        await eventually(expired, timeout=SETTLE_WITHIN, what="the lost session's expiry")
        return {"worker": "rescuer", "redelivery": ctx.redelivery, "key": ctx.idempotency_key}

    return slow


def _with_heartbeat(amqp_url: str, seconds: int) -> str:
    parts = urlsplit(amqp_url)
    query = "&".join(q for q in (parts.query, f"heartbeat={seconds}") if q)
    return urlunsplit(parts._replace(query=query))


async def _history(stack: Stack) -> list[Any]:
    store = await EventStore.connect(stack.settings.database_url)
    try:
        return [e.event for e in await store.read_events("lost-1")]
    finally:
        await store.close()


async def _lose_a_worker(
    stack: Stack, tmp_path: Path, lose: signal.Signals, zombie_hold: float
) -> tuple[dict[str, Any], Sink]:
    """Run ``lost-1`` on a worker process, lose it with ``lose``, and let a rescuer
    finish; a frozen worker wakes up once the execution has ended."""
    sink = Sink(tmp_path / "sink")
    marker = tmp_path / "started"
    held = await orbit_process(
        stack.settings,
        "worker",
        "tests.faults.sink_worker:worker",
        ORBIT_TEST_SINK=str(sink.path),
        ORBIT_TEST_MARKER=str(marker),
        ORBIT_TEST_HOLD_SECONDS=str(zombie_hold),
        ORBIT_AMQP_URL=_with_heartbeat(stack.settings.amqp_url, FROZEN_HEARTBEAT_SECONDS),
    )
    database = Database(stack.settings.database_url)

    async def expired() -> bool:
        """Whether the engine has closed the held worker's session (the timer's liveness)."""
        closed = await database.fetchval(
            "SELECT bool_and(closed_at IS NOT NULL) FROM worker_sessions WHERE worker_id = $1",
            f"{socket.gethostname()}-{held.pid}",  # the SDK's default worker id
        )
        return bool(closed)

    rescuer: Worker | None = None
    try:
        await eventually(
            stack.client.workers,
            lambda w: len(w) == 1,
            timeout=SETTLE_WITHIN,
            what="the worker process",
        )
        await stack.client.start("slow", None, execution_id="lost-1")

        async def started() -> bool:
            return marker.exists()

        await eventually(started, timeout=SETTLE_WITHIN, what="the worker process to take the task")
        # Its next heartbeat tells the engine it holds the task.
        await eventually(
            stack.client.workers,
            lambda ws: any(w["inflight"] == 1 for w in ws),
            timeout=SETTLE_WITHIN,
            what="a heartbeat naming the task",
        )
        rescuer = Worker([_rescuer(sink, expired)], worker_id="rescuer", settings=stack.settings)
        await rescuer.start()
        held.send_signal(lose)
        execution = view_json(await stack.client.wait("lost-1", timeout=SETTLE_WITHIN))
        assert await expired()
        # Whatever reached the task queue since has been taken and settled: a second
        # dispatch would have run, and a redelivery RabbitMQ took back from a frozen
        # worker has been skipped (or run, which the counts below would show).
        task_queue = stack.settings.topology.task_queue("slow", "1")
        await eventually(
            lambda: asyncio.to_thread(queue_counts, task_queue),
            lambda counts: counts == (0, 0),
            timeout=SETTLE_WITHIN,
            interval=0.2,
            what="the task queue settled",
        )
        if lose is signal.SIGSTOP:
            held.send_signal(signal.SIGCONT)  # the zombie finishes its run, too late

            async def stale() -> list[Any]:
                return [e for e in await _history(stack) if isinstance(e, StaleResultIgnored)]

            await eventually(stale, timeout=SETTLE_WITHIN, what="the zombie's late result")
        return execution, sink
    finally:
        if rescuer is not None:
            await rescuer.stop()
        if held.returncode is None:
            held.kill()
            await held.wait()


def _counted(events: list[Any]) -> Counter[str]:
    return Counter(type(event).__name__ for event in events)


@pytest.mark.timeout(600)  # generous: only a failing run comes near it
async def test_a_killed_workers_task_runs_once_more_not_twice(stack: Stack, tmp_path: Path) -> None:
    execution, sink = await _lose_a_worker(stack, tmp_path, signal.SIGKILL, zombie_hold=600)
    assert execution["status"] == "completed"
    assert execution["output"] == {"worker": "rescuer", "redelivery": True, "key": "lost-1:hold"}
    runs = sink.runs()
    print(f"SIGKILL: {len(runs)} runs of lost-1:hold: {runs}")
    # The killed run and RabbitMQ's redelivery of the same token: no second dispatch.
    assert sink.counts() == {"lost-1:hold": 2}
    assert len({run.token for run in runs}) == 1
    events = await _history(stack)
    counted = _counted(events)
    assert counted[StepDispatched.__name__] == 1
    assert counted[StepAttemptUncertain.__name__] == 0
    assert Counter(e.unit for e in events if isinstance(e, StepSucceeded)) == {"hold": 1}


@pytest.mark.timeout(600)  # generous: only a failing run comes near it
async def test_a_frozen_workers_task_runs_once_more_and_its_late_result_is_stale(
    stack: Stack, tmp_path: Path
) -> None:
    execution, sink = await _lose_a_worker(stack, tmp_path, signal.SIGSTOP, zombie_hold=5)
    assert execution["status"] == "completed"
    assert execution["output"] == {"worker": "rescuer", "redelivery": True, "key": "lost-1:hold"}
    runs = sink.runs()
    print(f"SIGSTOP: {len(runs)} runs of lost-1:hold: {runs}")
    # The zombie's run and one more by the rescuer: the engine's second dispatch (and
    # RabbitMQ's requeue of the original delivery skipped), or, had RabbitMQ dropped
    # the frozen connection first, the original delivery's redelivery.
    assert sink.counts() == {"lost-1:hold": 2}
    assert [run.who for run in runs][1:] == ["rescuer"]
    events = await _history(stack)
    uncertain = [e for e in events if isinstance(e, StepAttemptUncertain)]
    if runs[1].token != runs[0].token:  # the engine dispatched again: it was uncertain
        assert len(uncertain) == 1
        assert "not heard from" in uncertain[0].reason
    else:
        assert uncertain == []
    assert Counter(e.unit for e in events if isinstance(e, StepSucceeded)) == {"hold": 1}
    [stale] = [e for e in events if isinstance(e, StaleResultIgnored)]
    assert stale.token == runs[0].token  # the zombie's own delivery
