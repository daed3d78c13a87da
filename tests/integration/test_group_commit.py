"""Group commit: appends that arrive together share one transaction, conflicts stay their own."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from orbit_model import compile_definition
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.events import CancelRequested
from orbit_model.inputs import start_execution
from orbit_model.state import evolve, replay
from orbit_services.store import Append, AppendConflict, EventStore, OutboxMessage
from orbit_services.store.group_commit import GroupCommit
from tests.database import Database

from .conftest import OrbitEnv

HELLO = compile_definition((Path(__file__).parents[2] / "examples/hello-world.yaml").read_text())


def _start(execution_id: str, messages: int = 1) -> Append:
    event = start_execution(HELLO.ir, HELLO.hash, execution_id, {})
    outbox = [
        OutboxMessage("x", execution_id, f"{execution_id}/{n}".encode()) for n in range(messages)
    ]
    return Append(execution_id, 0, [event], replay([event]), outbox=outbox)


class CountingStore(EventStore):
    """Counts its append transactions."""

    transactions = 0

    async def append(self, appends: Sequence[Append]) -> list[int]:
        self.transactions += 1
        return await super().append(appends)


async def test_appends_arriving_together_share_a_transaction_and_keep_their_rows(
    orbit_env: OrbitEnv,
) -> None:
    store = await CountingStore.connect(orbit_env.settings.database_url)
    try:
        await store.register_definition(HELLO)
        commits = GroupCommit(store)
        appends = [_start(f"g-{n}", messages=n % 3) for n in range(50)]
        results = await asyncio.gather(*(commits.append(a) for a in appends))
        assert store.transactions == 1  # all 50 in one
        for append, ids in zip(appends, results, strict=True):
            rows = await Database(orbit_env.settings.database_url).fetch(
                "SELECT body FROM outbox WHERE id = ANY($1::bigint[]) ORDER BY id", ids
            )
            assert [bytes(r["body"]) for r in rows] == [m.body for m in append.outbox]
        assert {row.execution_id for row in await store.list_executions(limit=100)} == {
            f"g-{n}" for n in range(50)
        }
    finally:
        await store.close()


async def test_only_the_append_that_lost_its_race_fails(orbit_env: OrbitEnv) -> None:
    store = await EventStore.connect(orbit_env.settings.database_url)
    try:
        await store.register_definition(HELLO)
        commits = GroupCommit(store)
        await commits.append(_start("taken"))
        results = await asyncio.gather(
            commits.append(_start("fresh-1")),
            commits.append(_start("taken")),
            commits.append(_start("fresh-2")),
            return_exceptions=True,
        )
        assert isinstance(results[1], AppendConflict)
        assert not isinstance(results[0], BaseException)
        assert not isinstance(results[2], BaseException)
        assert await store.execution("fresh-1") is not None
        assert await store.execution("fresh-2") is not None
        assert len(await store.read_events("taken")) == 1
        with pytest.raises(AppendConflict):
            await commits.append(_start("fresh-1"))
    finally:
        await store.close()


async def test_an_append_that_cannot_be_written_fails_only_its_own_caller(
    orbit_env: OrbitEnv,
) -> None:
    store = await EventStore.connect(orbit_env.settings.database_url)
    try:
        await store.register_definition(HELLO)
        commits = GroupCommit(store)
        await commits.append(_start("bad"))
        state = replay([e.event for e in await store.read_events("bad")])
        unstorable = CancelRequested(reason="\x00")  # jsonb refuses a NUL character
        bad = Append("bad", state.last_seq, [unstorable], evolve(state, unstorable))
        results = await asyncio.gather(
            commits.append(_start("good-1")),
            commits.append(bad),
            commits.append(_start("good-2")),
            return_exceptions=True,
        )
        # The store translates the driver's refusal: a value it cannot store.
        assert isinstance(results[1], OrbitError), results[1]
        assert results[1].code == ErrorCode.INVALID_REQUEST
        assert not isinstance(results[0], BaseException)
        assert not isinstance(results[2], BaseException)
        assert await store.execution("good-1") is not None
        assert await store.execution("good-2") is not None
    finally:
        await store.close()
