"""The gateway's start rules, on the plain-Python store and on Postgres.

:class:`~orbit_services.gateway.api.starts.Starts` over each store of
``tests/integration/stores.py``, with the group commit and definitions
registry the gateway gives it and a relay that records what it is handed:
what a start answers, once, again, otherwise and past the limit of active
executions. The HTTP and AMQP doors to the same rules: test_gateway.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from orbit_model import compile_definition
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.messages import StartExecution
from orbit_services.gateway.api.definitions import DefinitionRegistry
from orbit_services.gateway.api.starts import Starts
from orbit_services.runtime.settings import load_settings
from orbit_services.store import GroupCommit, OutboxMessage, Store

from .stores import store

__all__ = ["store"]  # the fixture, parametrized over the stores

EXAMPLES = Path(__file__).parents[2] / "examples"
HELLO = compile_definition((EXAMPLES / "hello-world.yaml").read_text())


class RecordingRelay:
    """Stands for the outbox relay: remembers what a start hands it to publish."""

    def __init__(self) -> None:
        self.published: list[OutboxMessage] = []

    async def publish_committed(
        self, ids: Sequence[int], messages: Sequence[OutboxMessage]
    ) -> None:
        assert len(ids) == len(messages)
        self.published.extend(messages)


def _wake(execution_id: str) -> OutboxMessage:
    return OutboxMessage("orbit.decider", "0", execution_id.encode())


def _no_limits(what: str, value: Any) -> None:
    """The payload limits are the gateway's (test_hostile_input.py), not the start rules'."""


@pytest.fixture
async def rules(store: Store) -> tuple[Starts, RecordingRelay]:
    await store.register_definition(HELLO)
    return await _starts(store)


async def _starts(store: Store, **settings: object) -> tuple[Starts, RecordingRelay]:
    relay = RecordingRelay()
    commits = GroupCommit(store)
    starts = Starts(
        store,
        relay,  # type: ignore[arg-type]  # only publish_committed is called
        commits,
        DefinitionRegistry(store),
        load_settings(**settings),
        check=_no_limits,
        wake=_wake,
    )
    return starts, relay


def _start(execution_id: str | None, name: str = "ada", **given: Any) -> StartExecution:
    return StartExecution(
        workflow="hello-world", execution_id=execution_id, input={"name": name}, **given
    )


async def test_a_start_again_is_answered_and_starts_nothing(
    rules: tuple[Starts, RecordingRelay], store: Store
) -> None:
    starts, relay = rules
    assert await starts.start(_start("e-1")) == {"execution_id": "e-1", "created": True}
    assert await starts.start(_start("e-1")) == {"execution_id": "e-1", "created": False}
    assert relay.published == [_wake("e-1")]  # one wake: the second start wrote nothing
    row = await store.execution("e-1")
    assert row is not None
    assert (row.version, row.input) == ("1.0.0", {"name": "ada"})


async def test_a_start_that_differs_is_refused_unless_it_asks_for_the_existing(
    rules: tuple[Starts, RecordingRelay],
) -> None:
    starts, _ = rules
    await starts.start(_start("e-1"))
    with pytest.raises(OrbitError) as refused:
        await starts.start(_start("e-1", name="grace"))
    assert refused.value.code is ErrorCode.EXECUTION_EXISTS
    assert "input" in refused.value.message
    existing = await starts.start(_start("e-1", name="grace", on_conflict="use_existing"))
    assert existing == {"execution_id": "e-1", "created": False}


async def test_an_unknown_workflow_or_a_bad_id_is_refused(
    rules: tuple[Starts, RecordingRelay],
) -> None:
    starts, _ = rules
    with pytest.raises(OrbitError) as unknown:
        await starts.start(StartExecution(workflow="nope", input={}))
    assert unknown.value.code is ErrorCode.WORKFLOW_NOT_FOUND
    with pytest.raises(OrbitError) as bad:
        await starts.start(_start("has space"))
    assert bad.value.code is ErrorCode.INVALID_EXECUTION_ID


async def test_past_the_active_limit_a_start_is_refused_and_a_repeat_answered(
    store: Store,
) -> None:
    await store.register_definition(HELLO)
    starts, _ = await _starts(store, max_active_executions=1)
    await starts.start(_start("e-1"))
    with pytest.raises(OrbitError) as full:
        await starts.start(_start("e-2"))
    assert full.value.code is ErrorCode.RESOURCE_EXHAUSTED
    assert await starts.start(_start("e-1")) == {"execution_id": "e-1", "created": False}
    results = await starts.start_batch([_start("e-3"), _start("e-1")])
    assert [r.get("error", {}).get("code") for r in results] == ["RESOURCE_EXHAUSTED", None]


async def test_a_batch_answers_each_start_in_its_order(
    rules: tuple[Starts, RecordingRelay], store: Store
) -> None:
    starts, relay = rules
    await starts.start(_start("e-0"))
    results = await starts.start_batch(
        [
            _start("e-1"),
            _start("e-1"),  # again in the batch: started once
            _start("e-1", name="grace"),  # differs from the batch's first
            _start("e-0"),  # started before
            StartExecution(workflow="nope", execution_id="e-2", input={}),
        ]
    )
    assert [(r["execution_id"], r["created"]) for r in results] == [
        ("e-1", True),
        ("e-1", False),
        ("e-1", False),
        ("e-0", False),
        ("e-2", False),
    ]
    codes = [r.get("error", {}).get("code") for r in results]
    assert codes == [None, None, "EXECUTION_EXISTS", None, "WORKFLOW_NOT_FOUND"]
    assert relay.published == [_wake("e-0"), _wake("e-1")]
    assert await store.count_running() == 2
