"""The event store against a real Postgres: appends, conflicts, reads, definitions, outbox."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from orbit_model import compile_definition
from orbit_model.decider import decide_until_stable
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.events import CancelRequested
from orbit_model.inputs import start_execution
from orbit_model.state import evolve, replay
from orbit_services.store import Append, AppendConflict, EventStore, OutboxMessage
from orbit_services.store.migrate import migrate, migrations
from tests.database import Database

from .conftest import OrbitEnv

EXAMPLES = Path(__file__).parents[2] / "examples"
HELLO = compile_definition((EXAMPLES / "hello-world.yaml").read_text())


@pytest.fixture
async def store(orbit_env: OrbitEnv) -> AsyncIterator[EventStore]:
    store = await EventStore.connect(orbit_env.settings.database_url)
    try:
        yield store
    finally:
        await store.close()


def _created(execution_id: str) -> Append:
    event = start_execution(HELLO.ir, HELLO.hash, execution_id, {"name": "ada"})
    return Append(execution_id, 0, [event], evolve(replay([]), event))


async def test_migrations_apply_once(orbit_env: OrbitEnv) -> None:
    # The test database is a clone of a migrated template: nothing is left to apply.
    assert await migrate(orbit_env.settings.database_url) == []
    assert [m.number for m in migrations()] == list(range(1, len(migrations()) + 1))


async def test_a_second_start_with_the_same_id_conflicts(store: EventStore) -> None:
    await store.register_definition(HELLO)
    await store.append([_created("e-1")])
    with pytest.raises(AppendConflict) as conflict:
        await store.append([_created("e-1")])
    assert conflict.value.execution_ids == ("e-1",)
    assert [e.seq for e in await store.read_events("e-1")] == [1]


async def test_appends_are_gapless_and_update_the_execution_row(store: EventStore) -> None:
    await store.register_definition(HELLO)
    first = _created("e-2")
    await store.append([first])
    state, decided = decide_until_stable(first.state, HELLO.ir, now=1_000)
    ids = await store.append(
        [
            Append(
                "e-2",
                1,
                decided,
                state,
                timers_before=first.state.timers,
                outbox=[OutboxMessage("x", "y", b"{}")],
            )
        ]
    )
    assert len(ids) == 1
    stored = await store.read_events("e-2")
    assert [e.seq for e in stored] == list(range(1, 1 + 1 + len(decided)))
    assert replay(e.event for e in stored) == state
    assert [e.seq for e in await store.read_events("e-2", after_seq=2)] == [
        e.seq for e in stored[2:]
    ]
    row = await store.execution("e-2")
    assert row is not None
    assert (row.status, row.last_seq, row.input) == ("running", len(stored), {"name": "ada"})


async def test_a_stale_append_conflicts_and_writes_nothing(
    store: EventStore, orbit_env: OrbitEnv
) -> None:
    await store.register_definition(HELLO)
    first = _created("e-3")
    await store.append([first, _created("e-4")])
    state, decided = decide_until_stable(first.state, HELLO.ir, now=1_000)
    await store.append([Append("e-3", 1, decided, state)])
    # A second writer that also read seq 1 loses, and takes e-4's append down with it.
    with pytest.raises(AppendConflict):
        await store.append(
            [
                Append("e-4", 1, decided, state, outbox=[OutboxMessage("x", "y", b"{}")]),
                Append("e-3", 1, decided, state),
            ]
        )
    assert [e.seq for e in await store.read_events("e-4")] == [1]
    database = Database(orbit_env.settings.database_url)
    assert await database.fetchval("SELECT count(*) FROM outbox") == 0


async def test_concurrent_appenders_one_wins_per_seq(store: EventStore) -> None:
    await store.register_definition(HELLO)
    first = _created("e-5")
    await store.append([first])
    state, decided = decide_until_stable(first.state, HELLO.ir, now=1_000)
    results = await asyncio.gather(
        *(store.append([Append("e-5", 1, decided, state)]) for _ in range(8)),
        return_exceptions=True,
    )
    assert sum(not isinstance(r, BaseException) for r in results) == 1
    assert all(isinstance(r, AppendConflict) for r in results if isinstance(r, BaseException))


async def test_definitions_are_immutable(store: EventStore) -> None:
    assert await store.register_definition(HELLO) is True
    assert await store.register_definition(HELLO) is False
    changed = compile_definition(
        (EXAMPLES / "hello-world.yaml").read_text().replace("Greets", "Says hi to")
    )
    with pytest.raises(OrbitError) as conflict:
        await store.register_definition(changed)
    assert conflict.value.code is ErrorCode.DEFINITION_CONFLICT
    loaded = await store.definition_by_hash(HELLO.hash)
    assert loaded is not None
    assert loaded.hash == HELLO.hash
    assert [d.version for d in await store.list_definitions()] == ["1.0.0"]


async def test_the_history_key_is_the_only_guard(orbit_env: OrbitEnv) -> None:
    connection = await asyncpg.connect(orbit_env.settings.database_url)
    try:
        key = await connection.fetchval(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'history_pkey'"
        )
    finally:
        await connection.close()
    assert key == "PRIMARY KEY (execution_id, seq)"


async def test_appends_racing_over_the_same_executions_conflict_and_never_deadlock(
    store: EventStore,
) -> None:
    """Two writers append to the same executions, listed in opposite orders: one wins
    each round and the other sees AppendConflict (rows are locked in id order, and a
    deadlock would be a conflict too), never another error."""
    await store.register_definition(HELLO)
    ids = [f"race-{n:03d}" for n in range(200)]
    states = {}
    for execution_id in ids:
        created = start_execution(HELLO.ir, HELLO.hash, execution_id, {})
        states[execution_id] = replay([created])
        await store.append([Append(execution_id, 0, [created], states[execution_id])])

    def batch(order: list[str]) -> list[Append]:
        appends = []
        for execution_id in order:
            state = states[execution_id]
            event = CancelRequested(reason="race")
            appends.append(Append(execution_id, state.last_seq, [event], evolve(state, event)))
        return appends

    for _ in range(25):
        outcomes = await asyncio.gather(
            store.append(batch(ids)), store.append(batch(ids[::-1])), return_exceptions=True
        )
        winners = [o for o in outcomes if not isinstance(o, BaseException)]
        losers = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(winners) == 1, outcomes
        assert all(isinstance(o, AppendConflict) for o in losers), losers
        for execution_id in ids:
            states[execution_id] = evolve(states[execution_id], CancelRequested(reason="race"))
    for execution_id in ids:
        seqs = [stored.seq for stored in await store.read_events(execution_id)]
        assert seqs == list(range(1, 27))
