"""An execution whose stored history no longer decodes ends failed, and still answers.

An event that cannot be decoded is planted straight in ``history`` (as a
corrupted row, or one a newer Orbit wrote, would be): nested deeper than the
JSON decoder goes, of a kind that does not exist, with a field of the wrong
type. Whatever then reaches the decider for the execution (a task's result, a
signal or a cancel, which the gateway refuses but passes on as a wake-up) ends
it ``failed`` with ``HISTORY_UNREADABLE``, instead of failing the decider's
batch again and again. Its view and history still answer, the bad event shown
as stored; the executions beside it go on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from aio_pika.abc import AbstractChannel

from orbit_model.errors import ErrorCode
from orbit_model.messages import TaskAssignment, TaskResult, Wake
from orbit_model.outcome_codes import OutcomeCode
from orbit_sdk.amqp import Publisher, connect, open_channel
from orbit_services.gateway import create_app
from orbit_services.gateway.api.executions import Executions
from orbit_services.store import EventStore
from orbit_services.store.history import RAW_SHOWN_CHARS
from orbit_services.store.outbox import OutboxRelay

from .conftest import OrbitEnv
from .eventually import eventually
from .rig import Rig, decider_rig

FRAGILE = """
orbit: 1
workflow: fragile
version: 1.0.0
timeout: 1h
signals:
  nudge: {type: object}
queries:
  greeted: ${ steps.greet.output != null }
tasks:
  greet:
    version: "1"
    output: {type: object, required: [greeting], properties: {greeting: {type: string}}}
steps:
  - id: greet
    task: greet
    input: {name: ada}
"""

PARENT = """
orbit: 1
workflow: guardian
version: 1.0.0
steps:
  - id: kid
    workflow: fragile@1.0.0
"""

DEEP = 2500
"""Far deeper than the JSON decoder goes (and, as text, longer than a history entry shows)."""


class RecordingPublisher(Publisher):
    """The gateway's publisher, which remembers the routing key of everything it sends."""

    def __init__(self, channel: AbstractChannel) -> None:
        super().__init__(channel)
        self.sent: list[str] = []

    async def publish(self, exchange: str, routing_key: str, body: bytes, **kwargs: Any) -> None:
        self.sent.append(routing_key)
        await super().publish(exchange, routing_key, body, **kwargs)


@dataclass
class Stack:
    """The decider (with the test playing the worker) and a gateway over HTTP."""

    rig: Rig
    client: httpx.AsyncClient
    gateway_publisher: RecordingPublisher

    async def start(self, execution_id: str, workflow: str = "fragile") -> TaskAssignment:
        """Start an execution; the task the decider sends for it."""
        body = {"workflow": workflow, "execution_id": execution_id}
        response = await self.client.post("/v1/executions", json=body)
        assert response.status_code == 201, response.text
        return await self.rig.next_dispatch()

    async def plant(self, execution_id: str, stored_type: str, data: str) -> int:
        """Write an event after the execution's last one, behind the store's back; its seq."""
        last = await self.rig.database.fetchval(
            "SELECT max(seq) FROM history WHERE execution_id = $1", execution_id
        )
        await self.rig.database.execute(
            "INSERT INTO history (execution_id, seq, type, data) VALUES ($1, $2, $3, $4::jsonb)",
            execution_id,
            last + 1,
            stored_type,
            data,
        )
        return int(last) + 1

    async def failed(
        self, execution_id: str, code: str = ErrorCode.HISTORY_UNREADABLE
    ) -> dict[str, Any]:
        """Wait (a few seconds at most) for the execution to end failed with ``code``;
        its view."""

        async def view() -> dict[str, Any]:
            response = await self.client.get(f"/v1/executions/{execution_id}")
            assert response.status_code == 200, response.text
            return dict(response.json())

        shown = await eventually(view, lambda v: v["status"] != "running", timeout=5, what="end")
        assert shown["status"] == "failed", shown
        assert shown["error"]["code"] == code, shown["error"]
        return shown

    async def history(self, execution_id: str) -> list[dict[str, Any]]:
        response = await self.client.get(f"/v1/executions/{execution_id}/history")
        assert response.status_code == 200, response.text
        return list(response.json())

    async def refused(self, method: str, path: str, **kwargs: Any) -> str:
        """Send a request the gateway must refuse with ``HISTORY_UNREADABLE``; its message."""
        response = await self.client.request(method, f"/v1/executions/{path}", **kwargs)
        assert response.status_code == 409, response.text
        error = response.json()["error"]
        assert error["code"] == ErrorCode.HISTORY_UNREADABLE
        return str(error["message"])


@pytest.fixture
async def stack(orbit_env: OrbitEnv) -> AsyncIterator[Stack]:
    settings = orbit_env.settings
    async with decider_rig(settings, orbit_env.topology) as rig:
        store = await EventStore.connect(settings.database_url, min_size=1, max_size=4)
        connection = await connect(settings.amqp_url)
        publisher = RecordingPublisher(await open_channel(connection))
        relay = OutboxRelay(store.outbox, publisher)
        executions = Executions(store, relay, orbit_env.topology, settings)
        transport = httpx.ASGITransport(app=create_app(executions))
        url = f"http://127.0.0.1:{settings.http_port}"  # a Host the gateway serves
        try:
            async with httpx.AsyncClient(transport=transport, base_url=url) as client:
                for definition in (FRAGILE, PARENT):
                    response = await client.post(
                        "/v1/definitions",
                        content=definition,
                        headers={"content-type": "application/yaml"},
                    )
                    assert response.status_code in (200, 201), response.text
                yield Stack(rig, client, publisher)
        finally:
            await executions.close()
            await connection.close()
            await store.close()


def _deep_signal() -> str:
    return '{"type": "SignalReceived", "name": "nudge", "payload": ' + "[" * DEEP + "]" * DEEP + "}"


async def test_an_event_nested_too_deep_fails_its_execution_and_the_others_go_on(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="orbit.decider")
    # The same decider partition: decided by the same consumer, often in one batch.
    assert stack.rig.topology.partition_of("deep-1") == stack.rig.topology.partition_of("fine-1")
    deep_task = await stack.start("deep-1")
    fine_task = await stack.start("fine-1")
    seq = await stack.plant("deep-1", "SignalReceived", _deep_signal())
    # Both results at once, likely one batch: the bad history must not hold up the other.
    await asyncio.gather(
        *(
            stack.rig.send(
                TaskResult(execution_id=t.execution_id, token=t.token, output={"greeting": "hi"})
            )
            for t in (deep_task, fine_task)
        )
    )
    view = await stack.failed("deep-1")
    message = view["error"]["message"]
    assert f"event {seq} (SignalReceived)" in message
    assert "recursion limit exceeded" in message
    assert (view["steps"], view["waiting_for"], view["output"]) == ({}, [], None)
    await eventually(lambda: stack.rig.status("fine-1"), lambda s: s == "completed", timeout=5)

    history = await stack.history("deep-1")
    assert [entry["seq"] for entry in history] == list(range(1, seq + 2))
    bad = history[seq - 1]
    assert (bad["type"], bad["data"], bad["error"]["code"]) == (
        "SignalReceived",
        {},
        ErrorCode.HISTORY_UNREADABLE,
    )
    assert bad["raw"].startswith("{")
    assert "[[[[" in bad["raw"]
    assert len(bad["raw"]) == RAW_SHOWN_CHARS  # cut short
    end = history[-1]
    assert end["type"] == "WorkflowFailed"
    assert end["data"]["error"]["code"] == ErrorCode.HISTORY_UNREADABLE
    assert "raw" not in end or end["raw"] is None

    # A later input finds the end in the history: dropped, no second failure, no second log.
    batches = stack.rig.decider.batches
    await stack.rig.send(Wake(execution_id="deep-1"))
    await eventually(lambda: _settled(stack.rig, batches), what="the wake to be decided")
    assert len(await stack.history("deep-1")) == seq + 1
    logged = [
        r for r in caplog.records if getattr(r, "action", "") == "execution.history_unreadable"
    ]
    assert [(r.levelname, getattr(r, "execution_id", None)) for r in logged] == [
        ("ERROR", "deep-1")
    ]


async def _settled(rig: Rig, batches: int) -> bool:
    return rig.decider.batches > batches


async def test_an_unknown_kind_fails_its_execution_when_signalled_and_clears_its_timers(
    stack: Stack,
) -> None:
    await stack.start("unknown-1")
    timers = "SELECT count(*) FROM timers WHERE execution_id = $1"
    assert await stack.rig.database.fetchval(timers, "unknown-1") == 1  # the workflow timeout
    seq = await stack.plant("unknown-1", "StepTeleported", '{"type": "StepTeleported"}')
    # The gateway cannot read the history to take the signal: it refuses it, and wakes
    # the decider, which ends the execution (nothing else would ever come for it).
    message = await stack.refused("POST", "unknown-1/signals/nudge", json={})
    assert f"event {seq} (StepTeleported)" in message
    view = await stack.failed("unknown-1")
    assert "StepTeleported" in view["error"]["message"]
    assert await stack.rig.database.fetchval(timers, "unknown-1") == 0
    row = await stack.rig.store.execution("unknown-1")
    assert row is not None
    assert row.closed_at is not None
    await stack.refused("GET", "unknown-1/queries/greeted")
    await stack.refused("POST", "unknown-1/cancel", json={"reason": "stuck"})
    [bad] = [e for e in await stack.history("unknown-1") if e["seq"] == seq]
    assert bad["raw"] == '{"type": "StepTeleported"}'


async def test_reading_an_unreadable_execution_sends_nothing(stack: Stack) -> None:
    await stack.start("quiet-1")
    stack.gateway_publisher.sent.clear()
    await stack.plant("quiet-1", "StepTeleported", '{"type": "StepTeleported"}')
    # A read has no side effect: the view, the history and a query send the decider
    # nothing. Only a write (a signal or a cancel, which it refuses) wakes it.
    response = await stack.client.get("/v1/executions/quiet-1")
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "running"
    response = await stack.client.get("/v1/executions/quiet-1", params={"wait": "0.1"})
    assert response.status_code == 200, response.text
    await stack.history("quiet-1")
    await stack.refused("GET", "quiet-1/queries/greeted")
    assert stack.gateway_publisher.sent == []
    row = await stack.rig.store.execution("quiet-1")
    assert row is not None
    assert row.status == "running"
    await stack.refused("POST", "quiet-1/signals/nudge", json={})
    assert stack.gateway_publisher.sent != []
    await stack.failed("quiet-1")


async def test_a_child_with_a_field_of_the_wrong_type_fails_and_answers_its_parent(
    stack: Stack,
) -> None:
    await stack.start("parent-1", workflow="guardian")  # its child's task, dispatched
    child = "parent-1:kid"
    wrong = '{"type": "StepSucceeded", "unit": "greet", "attempt": "first"}'
    seq = await stack.plant(child, "StepSucceeded", wrong)
    await stack.refused("POST", f"{child}/cancel")  # the cancel wakes the decider too
    view = await stack.failed(child)
    assert f"event {seq} (StepSucceeded)" in view["error"]["message"]
    assert "StepSucceeded.attempt" in view["error"]["message"]
    parent = await stack.failed("parent-1", OutcomeCode.CHILD_FAILED)
    assert (
        f"child workflow {child} failed: event {seq} (StepSucceeded)" in parent["error"]["message"]
    )
