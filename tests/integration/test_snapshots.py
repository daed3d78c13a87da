"""Snapshots: an execution past ORBIT_SNAPSHOT_EVERY events loads from its snapshot and tail.

The decider writes the snapshot in its append; a decider (or gateway, or
dispatcher) that does not hold the state reads the snapshot and the events
after it, and must get the very state a full replay gives, so that it
decides the same. A snapshot that no longer decodes, or was written by
other models, is ignored and the history replayed: never a failure.
"""

from __future__ import annotations

import asyncpg

from orbit_model import compile_definition
from orbit_model.inputs import start_execution
from orbit_model.messages import TaskResult, Wake
from orbit_model.snapshots import SNAPSHOT_VERSION
from orbit_model.state import ExecutionState, replay
from orbit_services.decider.deciding import Deciding
from orbit_services.store import Append, EventStore

from .conftest import OrbitEnv

EVERY = 10
FAN_OUT = compile_definition(
    """
orbit: 1
workflow: snapshotted
version: 1.0.0
tasks:
  t: {version: "1"}
steps:
  - id: each
    for: ${ input.items }
    concurrency: 4
    task: t
    input: {item: "${ item }"}
"""
)


async def _history(store: EventStore, execution_id: str) -> ExecutionState:
    return replay([stored.event for stored in await store.read_events(execution_id)])


async def _answer_some(deciding: Deciding, execution_id: str, count: int) -> None:
    """Answer up to ``count`` deliveries in flight, one decider batch each."""
    for _ in range(count):
        (state,) = (await deciding.states.current([execution_id])).values()
        tokens = [state.unit(key).token for key in state.active_units()]
        token = next((t for t in tokens if t), None)
        if token is None:
            return
        unit = state.unit_of_token(token) or ""
        output = state.unit(unit).input
        await deciding.handle([TaskResult(execution_id=execution_id, token=token, output=output)])


async def _started(env: OrbitEnv, store: EventStore, execution_id: str) -> Deciding:
    await store.register_definition(FAN_OUT)
    created = start_execution(FAN_OUT.ir, FAN_OUT.hash, execution_id, {"items": list(range(30))})
    await store.append([Append(execution_id, 0, [created], replay([created]))])
    deciding = Deciding(store, env.topology, env.settings_with(snapshot_every=EVERY))
    await deciding.handle([Wake(execution_id=execution_id)])
    return deciding


async def test_an_execution_past_k_events_loads_from_its_snapshot_and_decides_the_same(
    orbit_env: OrbitEnv,
) -> None:
    store = await EventStore.connect(orbit_env.settings.database_url)
    try:
        deciding = await _started(orbit_env, store, "s-1")
        await _answer_some(deciding, "s-1", 12)
        written = await store.snapshots.of("s-1")
        assert written is not None
        seq, version = written
        assert version == SNAPSHOT_VERSION
        full = await _history(store, "s-1")
        assert EVERY <= seq <= full.last_seq
        assert full.last_seq > seq  # a tail to replay
        # A decider that holds nothing loads the snapshot and the tail only.
        loaded = await store.snapshots.read({"s-1": 0})
        assert loaded.snapshots["s-1"].last_seq == seq
        assert [len(loaded.events["s-1"])] == [full.last_seq - seq]
        fresh = Deciding(store, orbit_env.topology, orbit_env.settings_with(snapshot_every=EVERY))
        assert await fresh.states.current(["s-1"]) == {"s-1": full}
        # It decides what the first would have: the execution completes as one.
        await _answer_some(fresh, "s-1", 200)
        done = await _history(store, "s-1")
        assert done.status == "completed"
        assert done.output == [{"item": i} for i in range(30)]
        assert fresh.states.get("s-1") is None  # finished: not kept
        # The history a user reads is whole: the snapshots only cache its fold.
        assert len(await store.read_history("s-1")) == done.last_seq
    finally:
        await store.close()


async def test_a_corrupt_or_outdated_snapshot_is_ignored_and_the_history_replayed(
    orbit_env: OrbitEnv,
) -> None:
    store = await EventStore.connect(orbit_env.settings.database_url)
    try:
        deciding = await _started(orbit_env, store, "s-2")
        await _answer_some(deciding, "s-2", 8)
        assert await store.snapshots.of("s-2") is not None
        full = await _history(store, "s-2")
        db = await asyncpg.connect(orbit_env.settings.database_url)
        try:
            for change in (
                "UPDATE snapshots SET state = '{\"units\": 7}'",  # no longer decodes
                "UPDATE snapshots SET state = jsonb_set(state, '{last_seq}', '1')",  # not its seq
                "UPDATE snapshots SET version = '0.old'",  # written by other models
            ):
                await db.execute(change)
                fresh = Deciding(store, orbit_env.topology, orbit_env.settings)
                assert await fresh.states.current(["s-2"]) == {"s-2": full}, change
        finally:
            await db.close()
        # And the execution goes on from there, writing a good snapshot again.
        await _answer_some(deciding, "s-2", 30)
        written = await store.snapshots.of("s-2")
        assert written is not None
        assert written[1] == SNAPSHOT_VERSION
    finally:
        await store.close()
