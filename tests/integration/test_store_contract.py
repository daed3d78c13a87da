"""One set of cases for every store: the plain-Python twin and Postgres.

What the gateway's start rules and the decider's turn need of a store
(:class:`orbit_services.store.Store`) holds on both; a case that passes on
one and fails on the other means the twin no longer tells the truth.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orbit_model import compile_definition
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.events import CancelRequested, Event
from orbit_model.inputs import start_execution
from orbit_model.repeated_starts import RecordedStart
from orbit_model.state import NO_EVENTS, WORKFLOW_TIMER, ExecutionState, evolve
from orbit_services.store import Append, AppendConflict, OutboxMessage, Store
from orbit_services.store.history import UndecodedEvent

from .stores import store

__all__ = ["store"]  # the fixture, parametrized over the stores

EXAMPLES = Path(__file__).parents[2] / "examples"
HELLO = compile_definition((EXAMPLES / "hello-world.yaml").read_text())
WAKE = OutboxMessage("orbit.decider", "0", b"{}")


def _created(execution_id: str, name: str = "ada") -> Append:
    event = start_execution(HELLO.ir, HELLO.hash, execution_id, {"name": name})
    return Append(execution_id, 0, [event], evolve(NO_EVENTS, event), outbox=[WAKE])


def _cancel(after: Append, seq: int) -> Append:
    event = CancelRequested(reason="enough")
    state = evolve(after.state, event)
    return Append(after.execution_id, seq, [event], state, timers_before=after.state.timers)


async def _events(store: Store, execution_id: str, after_seq: int = 0) -> list[Event]:
    loaded = await store.snapshots.read({execution_id: after_seq})
    found = loaded.events[execution_id]
    assert not any(isinstance(event, UndecodedEvent) for event in found)
    return [event for event in found if not isinstance(event, UndecodedEvent)]


async def _state(store: Store, execution_id: str) -> ExecutionState:
    state = NO_EVENTS
    for event in await _events(store, execution_id):
        state = evolve(state, event)
    return state


async def test_an_append_writes_the_events_the_row_and_the_outbox(store: Store) -> None:
    await store.register_definition(HELLO)
    ids = await store.append([_created("e-1"), _created("e-2")])
    assert len(ids) == 2
    assert ids == sorted(ids)
    assert [event.type for event in await _events(store, "e-1")] == ["WorkflowCreated"]
    row = await store.execution("e-1")
    assert row is not None
    assert (row.workflow, row.status, row.last_seq, row.input) == (
        "hello-world",
        "running",
        1,
        {"name": "ada"},
    )
    assert await store.execution("e-3") is None
    assert await store.count_running() == 2


async def test_a_taken_seq_or_an_existing_id_conflicts_and_writes_nothing(store: Store) -> None:
    await store.register_definition(HELLO)
    first = _created("e-1")
    await store.append([first])
    with pytest.raises(AppendConflict):
        await store.append([_created("e-1", name="grace")])
    # Two writers decide on seq 1: the first wins, the second loses on (execution_id, seq).
    await store.append([_cancel(first, 1)])
    with pytest.raises(AppendConflict):
        await store.append([_cancel(first, 1)])
    # A batch with one loser writes none of its appends.
    with pytest.raises(AppendConflict):
        await store.append([_created("e-2"), _cancel(first, 1)])
    assert await store.execution("e-2") is None
    assert [event.type for event in await _events(store, "e-1")] == [
        "WorkflowCreated",
        "CancelRequested",
    ]
    row = await store.execution("e-1")
    assert row is not None
    assert row.last_seq == 2


async def test_reads_give_the_events_after_a_seq(store: Store) -> None:
    await store.register_definition(HELLO)
    first = _created("e-1")
    await store.append([first])
    await store.append([_cancel(first, 1)])
    assert [event.type for event in await _events(store, "e-1", 1)] == ["CancelRequested"]
    assert await _events(store, "e-1", 2) == []
    assert await _events(store, "e-9") == []
    assert (await _state(store, "e-1")).last_seq == 2


async def test_timers_follow_the_appended_state(store: Store) -> None:
    await store.register_definition(HELLO)
    created = _created("e-1")
    state = created.state.model_copy(update={"deadline_at": 5_000})
    await store.append([Append("e-1", 0, created.events, state)])
    assert await store.timers.of("e-1") == {WORKFLOW_TIMER: 5_000}
    moved = state.model_copy(update={"deadline_at": 7_000})
    event = CancelRequested(reason="moved")
    await store.append([Append("e-1", 1, [event], moved, timers_before=state.timers)])
    assert await store.timers.of("e-1") == {WORKFLOW_TIMER: 7_000}
    cleared = moved.model_copy(update={"deadline_at": None})
    await store.append([Append("e-1", 2, [event], cleared, timers_before=moved.timers)])
    assert await store.timers.of("e-1") == {}
    assert await store.timers.of("e-9") == {}


async def test_recorded_starts_name_the_executions_that_exist(store: Store) -> None:
    await store.register_definition(HELLO)
    await store.append([_created("e-1")])
    recorded = await store.recorded_starts(["e-1", "e-2"])
    assert recorded == {"e-1": RecordedStart("hello-world", "1.0.0", HELLO.hash, {"name": "ada"})}


async def test_definitions_are_immutable(store: Store) -> None:
    assert await store.register_definition(HELLO) is True
    assert await store.register_definition(HELLO) is False
    other = compile_definition(
        (EXAMPLES / "hello-world.yaml").read_text().replace("default: world", "default: you")
    )
    assert other.hash != HELLO.hash
    with pytest.raises(OrbitError) as refused:
        await store.register_definition(other)
    assert refused.value.code is ErrorCode.DEFINITION_CONFLICT
    found = await store.definition("hello-world", HELLO.ir.version)
    assert found is not None
    assert found.hash == HELLO.hash
    by_hash = await store.definition_by_hash(HELLO.hash)
    assert by_hash is not None
    assert by_hash.ir.name == "hello-world"
    assert await store.definition("hello-world", "9.9.9") is None
    assert await store.definition_versions("hello-world") == [HELLO.ir.version]


async def test_no_session_holds_an_unknown_delivery(store: Store) -> None:
    assert await store.sessions.heartbeats(["e-1:a:1"]) == {}
    assert await store.sessions.heartbeats([]) == {}
