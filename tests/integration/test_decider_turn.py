"""The decider's turn, on the plain-Python store and on Postgres.

:class:`~orbit_services.decider.deciding.Deciding` over each store of
``tests/integration/stores.py``, without RabbitMQ: a wake dispatches the
first step and a result ends the execution; a decision made on a stale
cached state loses on ``(execution_id, seq)`` and is made again; a batch's
schedule deadlines are judged on who holds each delivery, read for the whole
batch at once. The decider as a service: test_decider.py.
"""

from __future__ import annotations

import pytest

from orbit_model import compile_definition
from orbit_model.events import AttemptAlive, Event, StepAttemptFailed, StepDispatched
from orbit_model.inputs import accept_cancel, start_execution
from orbit_model.messages import (
    ContractAnnouncement,
    InflightTask,
    RegisterWorker,
    TaskResult,
    TimerDue,
    Wake,
    decode_assignment,
)
from orbit_model.state import NO_EVENTS, evolve
from orbit_services.decider.deciding import Deciding
from orbit_services.runtime.settings import load_settings
from orbit_services.store import Append, EventStore, Store
from orbit_services.store.history import UndecodedEvent
from tests.fakes.memory_store import MemoryStore

from .stores import store

__all__ = ["store"]  # the fixture, parametrized over the stores

WATCHED = compile_definition(
    """
orbit: 1
workflow: watched
version: 1.0.0
tasks:
  work: {version: "1"}
steps:
  - id: work
    task: work
    schedule_timeout: 2s
"""
)
T0 = 1_000_000_000_000
"""The decider's clock in these tests, epoch ms."""


async def _history(store: Store, execution_id: str) -> list[Event]:
    found = (await store.snapshots.read({execution_id: 0})).events[execution_id]
    return [event for event in found if not isinstance(event, UndecodedEvent)]


async def _started(store: Store, execution_id: str) -> None:
    created = start_execution(WATCHED.ir, WATCHED.hash, execution_id)
    await store.append([Append(execution_id, 0, [created], evolve(NO_EVENTS, created))])


async def _token(store: Store, execution_id: str) -> str:
    (dispatched,) = [
        e for e in await _history(store, execution_id) if isinstance(e, StepDispatched)
    ]
    return dispatched.token


async def _hold(store: Store, execution_id: str, token: str, heartbeat_at: int) -> None:
    """An open worker session holds the delivery ``token``, which heartbeated then."""
    if isinstance(store, MemoryStore):
        store.sessions.hold(token, heartbeat_at)
        return
    assert isinstance(store, EventStore)
    contracts = (ContractAnnouncement(task="work", version="1"),)
    session = await store.sessions.open(RegisterWorker(worker_id="w-1", contracts=contracts))
    held = InflightTask(execution_id=execution_id, token=token, heartbeat_at=heartbeat_at)
    await store.sessions.touch(session, [held])


@pytest.fixture
async def deciding(store: Store) -> Deciding:
    await store.register_definition(WATCHED)
    settings = load_settings()  # no task queue is declared: RabbitMQ is not needed
    return Deciding(store, settings.topology, settings, lambda: T0)


async def test_a_wake_dispatches_and_a_result_ends_the_execution(
    store: Store, deciding: Deciding
) -> None:
    await _started(store, "d-1")
    committed = await deciding.handle([Wake(execution_id="d-1")])
    (assignment,) = [decode_assignment(m.body) for m in committed.messages]
    assert (assignment.task, assignment.task_version) == ("work", "1")
    token = await _token(store, "d-1")
    await deciding.handle([TaskResult(execution_id="d-1", token=token, output={"n": 1})])
    row = await store.execution("d-1")
    assert row is not None
    assert (row.status, row.output) == ("completed", {"n": 1})


async def test_a_decision_on_a_stale_state_loses_and_is_made_again(
    store: Store, deciding: Deciding
) -> None:
    await _started(store, "d-2")
    await deciding.handle([Wake(execution_id="d-2")])  # caches the state
    token = await _token(store, "d-2")
    # The gateway records a cancel; its Wake has not arrived yet.
    state = NO_EVENTS
    for event in await _history(store, "d-2"):
        state = evolve(state, event)
    events = accept_cancel(state, "stop")
    after = state
    for event in events:
        after = evolve(after, event)
    await store.append([Append("d-2", state.last_seq, events, after)])
    await deciding.handle([TaskResult(execution_id="d-2", token=token, output={"n": 1})])
    history = await _history(store, "d-2")
    assert any(event.type == "CancelRequested" for event in history)
    row = await store.execution("d-2")
    assert row is not None
    assert (row.status, row.last_seq) == ("cancelled", len(history))


async def test_schedule_deadlines_are_judged_on_who_holds_each_delivery(
    store: Store, deciding: Deciding
) -> None:
    for execution_id in ("d-3", "d-4"):
        await _started(store, execution_id)
    await deciding.handle([Wake(execution_id="d-3"), Wake(execution_id="d-4")])
    taken, untaken = await _token(store, "d-3"), await _token(store, "d-4")
    await _hold(store, "d-3", taken, T0 + 1_000)
    due = T0 + 2_000
    deciding.clock = lambda: due
    await deciding.handle(
        [
            TimerDue(execution_id="d-3", key=f"schedule:{taken}", due_at=due),
            TimerDue(execution_id="d-4", key=f"schedule:{untaken}", due_at=due),
        ]
    )
    alive = [e for e in await _history(store, "d-3") if isinstance(e, AttemptAlive)]
    assert [e.token for e in alive] == [taken]
    failed = [e for e in await _history(store, "d-4") if isinstance(e, StepAttemptFailed)]
    assert [e.error.code for e in failed] == ["SCHEDULE_TIMEOUT"]
