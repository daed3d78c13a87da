"""The gateway against a real Postgres and RabbitMQ: every endpoint, its errors, and AMQP commands.

HTTP goes through httpx's ASGI transport (no port), except in the test of
:class:`GatewayService`, which serves on a real port and consumes commands.
No decider runs here: tests that need an execution to move append its events
directly, as the decider would.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import aio_pika
import asyncpg
import httpx
import pytest
from aio_pika.abc import (
    AbstractChannel,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustConnection,
)

from orbit_model import compile_definition
from orbit_model.decider import decide_until_stable
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.events import (
    AttemptAlive,
    Event,
    StaleResultIgnored,
    StepAttemptUncertain,
    StepDispatched,
    TaskFailure,
    TimerFired,
    WorkflowCancelled,
    WorkflowCompleted,
    WorkflowFailed,
)
from orbit_model.messages import (
    CancelExecution,
    CommandReply,
    InflightTask,
    RegisterWorker,
    SignalExecution,
    StartExecution,
    Wake,
    decode_decider_input,
    encode,
)
from orbit_model.state import evolve, replay
from orbit_model.topology import Topology
from orbit_sdk.amqp import Publisher, connect, open_channel
from orbit_sdk.logs import LogThrottle
from orbit_services.gateway import GatewayService, create_app
from orbit_services.gateway import errors as gateway_errors
from orbit_services.gateway.api.commands import CommandIntake
from orbit_services.gateway.api.executions import Executions
from orbit_services.gateway.edge.auth import AUTH_DISABLED_WARNING
from orbit_services.gateway.edge.guard import ENVELOPE_BYTES
from orbit_services.gateway.service import broker_ready
from orbit_services.runtime.broker import PARK_AFTER, declare_topology
from orbit_services.runtime.settings import Settings
from orbit_services.store import Append, DefinitionRow, EventStore, ExecutionRow
from orbit_services.store.event_store import ENDINGS_LISTENER_NAME
from orbit_services.store.outbox import OutboxRelay
from tests.database import Database
from tests.rabbitmq_queues import queue_counts

from .conftest import OrbitEnv
from .eventually import eventually

EXAMPLES = Path(__file__).parents[2] / "examples"
YAML = {"content-type": "application/yaml"}
JSON = {"content-type": "application/json"}


def local_url(settings: Settings) -> str:
    """The gateway's address as its own host serves it (a ``Host`` it accepts)."""
    return f"http://127.0.0.1:{settings.http_port}"


def example(name: str) -> str:
    return (EXAMPLES / f"{name}.yaml").read_text()


@dataclass
class Gateway:
    client: httpx.AsyncClient
    executions: Executions
    channel: AbstractChannel
    env: OrbitEnv

    @property
    def database(self) -> Database:
        return Database(self.env.settings.database_url)

    @property
    def store(self) -> EventStore:
        return self.executions.store

    async def deploy(self, *names: str) -> None:
        for name in names:
            response = await self.client.post(
                "/v1/definitions", content=example(name), headers=YAML
            )
            assert response.status_code in (200, 201), response.text

    async def start(self, workflow: str, **body: Any) -> str:
        response = await self.client.post("/v1/executions", json={"workflow": workflow, **body})
        assert response.status_code == 201, response.text
        return str(response.json()["execution_id"])

    async def append(self, execution_id: str, *events: Event) -> None:
        """Append events after the last one, as the decider would."""
        state = replay(e.event for e in await self.store.read_events(execution_id))
        after = state
        for event in events:
            after = evolve(after, event)
        await self.store.append(
            [Append(execution_id, state.last_seq, events, after, timers_before=state.timers)]
        )


@asynccontextmanager
async def running(env: OrbitEnv, settings: Settings) -> AsyncIterator[Gateway]:
    store = await EventStore.connect(settings.database_url, min_size=1, max_size=4)
    connection = await connect(settings.amqp_url)
    try:
        channel = await open_channel(connection)
        await declare_topology(channel, env.topology)
        executions = Executions(
            store, OutboxRelay(store.outbox, Publisher(channel)), env.topology, settings
        )
        await executions.listen_for_endings()
        app = create_app(
            executions, {"postgres": store.ping, "rabbitmq": lambda: broker_ready(connection)}
        )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=local_url(settings)) as client:
            yield Gateway(client, executions, channel, env)
        await executions.close()
    finally:
        await connection.close()
        await store.close()


@pytest.fixture
async def gateway(orbit_env: OrbitEnv) -> AsyncIterator[Gateway]:
    async with running(orbit_env, orbit_env.settings) as found:
        yield found


def error_of(response: httpx.Response) -> tuple[int, str, str]:
    error = response.json()["error"]
    return response.status_code, error["code"], error["message"]


# -- definitions ---------------------------------------------------------------


async def test_registering_is_created_once_and_immutable(gateway: Gateway) -> None:
    client = gateway.client
    first = await client.post("/v1/definitions", content=example("hello-world"), headers=YAML)
    assert first.status_code == 201
    hello = compile_definition(example("hello-world"))
    assert first.json() == {
        "name": "hello-world",
        "version": "1.0.0",
        "hash": hello.hash,
        "created": True,
    }
    again = await client.post("/v1/definitions", content=example("hello-world"), headers=YAML)
    assert again.status_code == 200
    assert again.json() == {**first.json(), "created": False}

    changed = example("hello-world").replace("Greets whoever", "Waves at whoever")
    status, code, message = error_of(
        await client.post("/v1/definitions", content=changed, headers=YAML)
    )
    assert (status, code) == (409, "DEFINITION_CONFLICT")
    assert "hello-world@1.0.0" in message
    assert hello.hash in message

    listed = (await client.get("/v1/definitions")).json()
    assert [(d["name"], d["version"], d["hash"]) for d in listed] == [
        ("hello-world", "1.0.0", hello.hash)
    ]
    assert listed[0]["registered_at"]


async def test_compiled_ir_is_registered_as_json(gateway: Gateway) -> None:
    fan_out = compile_definition(example("fan-out"))
    response = await gateway.client.post("/v1/definitions", json=fan_out.ir.to_json_data())
    assert response.status_code == 201
    assert response.json()["hash"] == fan_out.hash
    stored = await gateway.client.get("/v1/definitions/fan-out/1.0.0")
    assert stored.status_code == 200
    assert stored.json() == fan_out.ir.to_json_data()
    status, code, _ = error_of(await gateway.client.get("/v1/definitions/fan-out/9.9.9"))
    assert (status, code) == (404, "WORKFLOW_NOT_FOUND")


async def test_a_definition_that_does_not_compile_is_refused_with_its_lines(
    gateway: Gateway,
) -> None:
    broken = example("hello-world").replace("    task: greet", "    task: greet\n    retyr: {}")
    line = broken.splitlines().index("    retyr: {}") + 1
    response = await gateway.client.post("/v1/definitions", content=broken, headers=YAML)
    status, code, message = error_of(response)
    assert (status, code) == (400, "INVALID_DEFINITION")
    assert f"<body>:{line}: steps[0].retyr" in message
    assert [p["line"] for p in response.json()["error"]["details"]] == [line]

    bad_ir = {**compile_definition(example("hello-world")).ir.to_json_data(), "steps": "none"}
    status, code, message = error_of(await gateway.client.post("/v1/definitions", json=bad_ir))
    assert (status, code) == (400, "INVALID_DEFINITION")
    assert "steps" in message
    assert (await gateway.client.get("/v1/definitions")).json() == []


async def test_children_are_registered_first_and_pinned_by_hash(gateway: Gateway) -> None:
    client = gateway.client
    parent = example("order-fulfilment")
    status, code, message = error_of(
        await client.post("/v1/definitions", content=parent, headers=YAML)
    )
    assert (status, code) == (400, "CHILD_NOT_REGISTERED")
    assert "send-invoice@1.0.0" in message
    assert "orbit deploy" in message

    child = await client.post("/v1/definitions", content=example("send-invoice"), headers=YAML)
    assert child.status_code == 201
    registered = await client.post("/v1/definitions", content=parent, headers=YAML)
    assert registered.status_code == 201
    # Pinning fills in the child's hash but leaves the parent's own hash alone.
    assert registered.json()["hash"] == compile_definition(parent).hash
    ir = (await client.get("/v1/definitions/order-fulfilment/1.0.0")).json()
    invoice = next(step for step in ir["steps"] if step["id"] == "invoice")
    assert invoice["child"] == {
        "name": "send-invoice",
        "version": "1.0.0",
        "hash": child.json()["hash"],
    }


# -- starting ------------------------------------------------------------------


async def test_a_start_is_idempotent_per_execution_id(gateway: Gateway) -> None:
    await gateway.deploy("hello-world", "fan-out")
    client = gateway.client
    body = {"workflow": "hello-world", "execution_id": "order-42", "input": {"name": "ada"}}
    first = await client.post("/v1/executions", json=body)
    assert (first.status_code, first.json()) == (201, {"execution_id": "order-42", "created": True})
    again = await client.post("/v1/executions", json=body)
    assert (again.status_code, again.json()) == (
        200,
        {"execution_id": "order-42", "created": False},
    )
    other = {"workflow": "fan-out", "execution_id": "order-42", "input": {"numbers": []}}
    status, code, _ = error_of(await client.post("/v1/executions", json=other))
    assert (status, code) == (409, "EXECUTION_EXISTS")
    assert len(await gateway.store.read_events("order-42")) == 1

    generated = await gateway.start("hello-world")
    assert uuid.UUID(generated)
    view = (await client.get(f"/v1/executions/{generated}")).json()
    assert view["input"] == {"name": "world"}  # the schema's default applied


async def test_a_start_without_a_version_takes_the_highest(gateway: Gateway) -> None:
    # Not string order (1.9.9 > 1.10.0), and a release above its pre-release.
    for version in ("1.2.0", "1.10.0", "1.10.0-rc.1", "1.9.9"):
        text = example("hello-world").replace("version: 1.0.0", f"version: {version}")
        response = await gateway.client.post("/v1/definitions", content=text, headers=YAML)
        assert response.status_code == 201
    latest = await gateway.start("hello-world")
    assert (await gateway.client.get(f"/v1/executions/{latest}")).json()["version"] == "1.10.0"
    pinned = await gateway.start("hello-world", version="1.2.0")
    assert (await gateway.client.get(f"/v1/executions/{pinned}")).json()["version"] == "1.2.0"


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"workflow": "nope"}, 404, "WORKFLOW_NOT_FOUND"),
        ({"workflow": "hello-world", "version": "9.0.0"}, 404, "WORKFLOW_NOT_FOUND"),
        ({"workflow": "hello-world", "input": {"name": 5}}, 400, "INVALID_INPUT"),
        ({"workflow": "hello-world", "execution_id": "a b"}, 400, "INVALID_EXECUTION_ID"),
        ({"workflow": "hello-world", "execution_id": "x" * 201}, 400, "INVALID_EXECUTION_ID"),
        ({"workflow": "hello-world", "execution_id": ""}, 400, "INVALID_EXECUTION_ID"),
        ({"input": {}}, 400, "INVALID_REQUEST"),
        ({"workflow": "hello-world", "inptu": {}}, 400, "INVALID_REQUEST"),
    ],
)
async def test_a_start_is_refused_with_its_code(
    gateway: Gateway, body: dict[str, Any], status: int, code: str
) -> None:
    await gateway.deploy("hello-world")
    response = await gateway.client.post("/v1/executions", json=body)
    assert error_of(response)[:2] == (status, code)
    assert (await gateway.client.get("/v1/executions")).json()["items"] == []


async def test_a_body_that_is_not_json_is_a_bad_request(gateway: Gateway) -> None:
    headers = {"content-type": "application/json"}
    broken = await gateway.client.post("/v1/executions", content=b"{nope", headers=headers)
    status, code, message = error_of(broken)
    assert (status, code) == (400, "INVALID_REQUEST")
    assert "not valid JSON" in message
    plain = await gateway.client.post(
        "/v1/executions", content=b'{"workflow": "x"}', headers={"content-type": "text/plain"}
    )
    assert error_of(plain)[:2] == (415, "UNSUPPORTED_MEDIA_TYPE")
    assert "application/json" in error_of(plain)[2]


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
)
async def test_a_body_a_browser_may_send_cross_site_is_refused_and_nothing_stored(
    gateway: Gateway, content_type: str
) -> None:
    await gateway.deploy("hello-world")
    order = await gateway.start("hello-world", input={"name": "x"})
    headers = {"content-type": content_type}
    mutating = [
        ("/v1/definitions", example("hello-world").replace("1.0.0", "99.0.0").encode()),
        ("/v1/executions", b'{"workflow": "hello-world", "input": {"name": "y"}}'),
        (f"/v1/executions/{order}/cancel", b""),
        (f"/v1/executions/{order}/signals/go", b"{}"),
    ]
    for path, body in mutating:
        answer = await gateway.client.post(path, content=body, headers=headers)
        assert error_of(answer)[:2] == (415, "UNSUPPORTED_MEDIA_TYPE"), path
    assert [d.version for d in await gateway.store.list_definitions()] == ["1.0.0"]
    assert len(await gateway.store.read_events(order)) == 1
    listed = (await gateway.client.get("/v1/executions")).json()["items"]
    assert [item["execution_id"] for item in listed] == [order]


async def test_a_body_is_bounded_before_it_is_read_and_depth_is_bounded(
    orbit_env: OrbitEnv,
) -> None:
    settings = orbit_env.settings_with(max_payload_bytes=1000, max_definition_bytes=20_000)
    async with running(orbit_env, settings) as gateway:
        await gateway.deploy("send-invoice", "order-fulfilment")
        order = await gateway.start("order-fulfilment", input=ORDER)
        limit = max(1000 + ENVELOPE_BYTES, 20_000)
        big = b'{"workflow": "x", "input": "' + b"a" * limit + b'"}'
        answer = await gateway.client.post("/v1/executions", content=big, headers=JSON)

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it comes
            for _ in range(limit // 1000 + 2):
                yield b" " * 1000

        streamed = await gateway.client.post(
            f"/v1/executions/{order}/signals/approval", content=chunks(), headers=JSON
        )
        assert error_of(answer)[:2] == error_of(streamed)[:2] == (413, "PAYLOAD_TOO_LARGE")
        signal = f"/v1/executions/{order}/signals/approval"
        await _nested_signals(gateway, signal, (63, 64, 65))


async def test_a_body_nested_100000_deep_is_refused_and_the_execution_goes_on(
    gateway: Gateway,
) -> None:
    await gateway.deploy("send-invoice", "order-fulfilment")
    order = await gateway.start("order-fulfilment", input=ORDER)
    await _nested_signals(gateway, f"/v1/executions/{order}/signals/approval", (100_000,))
    start = b'{"workflow": "order-fulfilment", "input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    answer = await gateway.client.post("/v1/executions", content=start, headers=JSON)
    assert error_of(answer)[:2] == (400, "INVALID_REQUEST")


async def _nested_signals(gateway: Gateway, signal: str, depths: tuple[int, ...]) -> None:
    """Signals holding JSON nested ``depth`` deep: past 64, refused with a code and not
    recorded; the execution goes on, and its view answers."""
    execution_id = signal.split("/")[3]
    before = len(await gateway.store.read_events(execution_id))
    for depth in depths:
        body = b'{"approved": true, "x": ' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"
        answer = await gateway.client.post(signal, content=body, headers=JSON)
        if depth > 64:
            assert error_of(answer)[:2] == (400, "INVALID_REQUEST"), depth
        else:  # within the limit: the signal's own schema decides
            assert answer.status_code in (202, 422), (depth, answer.text)
            before += answer.status_code == 202
    assert len(await gateway.store.read_events(execution_id)) == before
    view = await gateway.client.get(f"/v1/executions/{execution_id}")
    assert view.status_code == 200
    assert view.json()["status"] == "running"


async def test_inputs_and_payloads_over_the_limit_are_refused(orbit_env: OrbitEnv) -> None:
    async with running(orbit_env, orbit_env.settings_with(max_payload_bytes=64)) as gateway:
        await gateway.deploy("hello-world", "send-invoice", "order-fulfilment")
        big = {"workflow": "hello-world", "input": {"name": "x" * 64}}
        status, code, message = error_of(await gateway.client.post("/v1/executions", json=big))
        assert (status, code) == (413, "PAYLOAD_TOO_LARGE")
        assert "the limit is 64" in message
        order = await gateway.start(
            "order-fulfilment", input={"order_id": "o", "items": [{}], "callback_url": "u"}
        )
        too_big = {"approved": True, "note": "y" * 64}
        response = await gateway.client.post(
            f"/v1/executions/{order}/signals/approval", json=too_big
        )
        assert error_of(response)[:2] == (413, "PAYLOAD_TOO_LARGE")


async def test_starts_beyond_the_active_limit_are_refused(orbit_env: OrbitEnv) -> None:
    async with running(orbit_env, orbit_env.settings_with(max_active_executions=1)) as gateway:
        await gateway.deploy("hello-world")
        await gateway.start("hello-world", execution_id="first")
        second = {"workflow": "hello-world", "execution_id": "second"}
        status, code, _ = error_of(await gateway.client.post("/v1/executions", json=second))
        assert (status, code) == (429, "RESOURCE_EXHAUSTED")
        # Repeating a start starts nothing, so it is answered even when full.
        repeat = {"workflow": "hello-world", "execution_id": "first"}
        assert (await gateway.client.post("/v1/executions", json=repeat)).status_code == 200
        await gateway.append("first", WorkflowCompleted(output=None))
        assert (await gateway.client.post("/v1/executions", json=second)).status_code == 201


async def _next_message(queue: AbstractQueue) -> AbstractIncomingMessage:
    """The next message on ``queue``, by consuming (decider queues refuse a basic.get)."""
    async with queue.iterator(no_ack=True) as messages:
        return await asyncio.wait_for(anext(messages), timeout=3)


async def test_a_start_wakes_the_deciders_partition(gateway: Gateway) -> None:
    await gateway.deploy("hello-world")
    topology = gateway.env.topology
    execution_id = await gateway.start("hello-world", execution_id="wake-me")
    queue = await gateway.channel.get_queue(
        topology.decider_queue(topology.partition_of(execution_id))
    )
    message = await _next_message(queue)
    assert decode_decider_input(message.body) == Wake(execution_id="wake-me")
    # Published rows are deleted with the next append, or by the sweeper's flush.
    assert await gateway.store.outbox.flush_published() == 1
    assert await gateway.database.fetchval("SELECT count(*) FROM outbox") == 0


# -- signals, cancel, queries --------------------------------------------------

ORDER = {"order_id": "o-1", "items": [{"sku": "a"}], "callback_url": "http://example.invalid"}


async def test_signals_are_recorded_or_refused(gateway: Gateway) -> None:
    await gateway.deploy("send-invoice", "order-fulfilment", "hello-world")
    client = gateway.client
    order = await gateway.start("order-fulfilment", input=ORDER)
    signals = f"/v1/executions/{order}/signals"
    accepted = await client.post(f"{signals}/approval", json={"approved": True})
    # No decider runs here: the await step is not reached yet, and will take it.
    later = {"seq": 2, "taken": "later", "steps": ["approval"]}
    assert (accepted.status_code, accepted.json()) == (202, later)
    history = (await client.get(f"/v1/executions/{order}/history")).json()
    assert history[-1]["type"] == "SignalReceived"
    data = {"name": "approval", "payload": {"approved": True}, "request_id": None}
    assert history[-1]["data"] == data

    status, code, message = error_of(await client.post(f"{signals}/nope", json={}))
    assert (status, code) == (404, "UNKNOWN_SIGNAL")
    assert "approval" in message
    invalid = await client.post(f"{signals}/approval", json={"approved": "yes"})
    assert error_of(invalid)[:2] == (422, "SIGNAL_PAYLOAD_INVALID")
    unknown = await client.post("/v1/executions/ghost/signals/approval", json={})
    assert error_of(unknown)[:2] == (404, "NOT_FOUND")
    text = await client.post(
        f"{signals}/approval", content=b"approved", headers={"content-type": "text/plain"}
    )
    assert error_of(text)[:2] == (415, "UNSUPPORTED_MEDIA_TYPE")

    await gateway.append(order, WorkflowCompleted(output={}))
    finished = await client.post(f"{signals}/approval", json={"approved": False})
    assert error_of(finished)[:2] == (409, "EXECUTION_FINISHED")
    assert len(await gateway.store.read_events(order)) == 3


async def test_a_signal_sent_again_with_its_request_id_is_recorded_once(
    gateway: Gateway,
) -> None:
    await gateway.deploy("send-invoice", "order-fulfilment")
    order = await gateway.start("order-fulfilment", input=ORDER)
    url = f"/v1/executions/{order}/signals/approval"
    sends = [
        gateway.client.post(url, params={"request_id": "r-1"}, json={"approved": True})
        for _ in range(4)
    ]
    responses = await asyncio.gather(*sends)  # racing: the losers re-read and see it
    first = {"seq": 2, "taken": "later", "steps": ["approval"]}
    assert [(r.status_code, r.json()) for r in responses] == [(202, first)] * 4
    other = await gateway.client.post(url, params={"request_id": "r-2"}, json={"approved": True})
    # The one await of approval takes the first: nothing is left to take this one.
    assert other.json() == {"seq": 3, "taken": "never", "steps": []}
    events = [e.event for e in await gateway.store.read_events(order)]
    assert [(e.type, getattr(e, "request_id", None)) for e in events[1:]] == [
        ("SignalReceived", "r-1"),
        ("SignalReceived", "r-2"),
    ]
    bad = await gateway.client.post(url, params={"request_id": "a b"}, json={"approved": True})
    assert error_of(bad)[:2] == (400, "INVALID_REQUEST")

    # Over AMQP a signal without a request id is known by its message id: a message
    # delivered twice (the gateway died before its ack) is recorded once.
    intake = CommandIntake(gateway.executions, Publisher(gateway.channel))
    commands = await gateway.channel.declare_queue(gateway.env.topology.commands, passive=True)
    await commands.consume(intake.on_message)
    exchange = await gateway.channel.get_exchange(gateway.env.topology.commands)
    body = encode(SignalExecution(execution_id=order, name="approval", payload={"approved": False}))
    for _ in range(2):
        await exchange.publish(aio_pika.Message(body, message_id="m-1"), "command")
    await exchange.publish(aio_pika.Message(body, message_id="m-2"), "command")

    async def signals() -> list[str | None]:
        events = [e.event for e in await gateway.store.read_events(order)]
        return [getattr(e, "request_id", "-") for e in events if e.type == "SignalReceived"]

    await eventually(signals, lambda found: len(found) == 4, what="the AMQP signals")
    # Every command was taken and acked, the duplicate too: had it been recorded, it
    # would be by now.
    await eventually(
        lambda: asyncio.to_thread(queue_counts, gateway.env.topology.commands),
        lambda counts: counts == (0, 0),
        timeout=30,
        interval=0.2,
        what="the commands settled",
    )
    assert await signals() == ["r-1", "r-2", "m-1", "m-2"]


async def test_concurrent_signals_each_get_their_own_seq(gateway: Gateway) -> None:
    await gateway.deploy("send-invoice", "order-fulfilment")
    order = await gateway.start("order-fulfilment", input=ORDER)
    url = f"/v1/executions/{order}/signals/approval"
    # They all read seq 1 and race: the losers re-read and append again.
    responses = await asyncio.gather(
        *(gateway.client.post(url, json={"approved": i % 2 == 0}) for i in range(6))
    )
    assert [r.status_code for r in responses] == [202] * 6
    assert sorted(r.json()["seq"] for r in responses) == list(range(2, 8))
    events = await gateway.store.read_events(order)
    assert [e.event.type for e in events[1:]] == ["SignalReceived"] * 6
    await gateway.store.outbox.flush_published()
    wakes = await gateway.database.fetchval("SELECT count(*) FROM outbox")
    assert wakes == 0  # each append's wake was published (and deleted)


async def test_cancel_is_requested_once_and_refused_once_finished(gateway: Gateway) -> None:
    await gateway.deploy("hello-world")
    client = gateway.client
    execution_id = await gateway.start("hello-world")
    cancel = f"/v1/executions/{execution_id}/cancel"
    # A reason Postgres cannot store is refused, not failed on (with the group it is in).
    refused = await client.post(cancel, json={"reason": "bad\u0000reason"})
    assert error_of(refused)[:2] == (400, "INVALID_REQUEST")
    response = await client.post(cancel, json={"reason": "changed my mind"})
    assert response.status_code == 200
    assert response.json()["execution_id"] == execution_id
    assert response.json()["status"] == "running"  # stopping is the decider's work
    # A second request while it stops adds nothing, and needs no body.
    assert (await client.post(cancel)).status_code == 200
    events = [e.event for e in await gateway.store.read_events(execution_id)]
    assert [e.type for e in events] == ["WorkflowCreated", "CancelRequested"]
    assert events[1].model_dump()["reason"] == "changed my mind"

    await gateway.append(execution_id, WorkflowCancelled(reason="changed my mind"))
    status, code, message = error_of(await client.post(cancel))
    assert (status, code) == (409, "EXECUTION_FINISHED")
    assert "cancelled" in message
    assert error_of(await client.post("/v1/executions/ghost/cancel"))[:2] == (404, "NOT_FOUND")


QUERIES = """
orbit: 1
workflow: queried
version: 1.0.0
input: {type: object}
queries:
  greeting: ${ steps.greet.output }
  broken: ${ input.missing.deep }
  nested: ${ NESTED }
tasks:
  greet: {version: "1"}
steps:
  - id: greet
    task: greet
"""


async def test_an_execution_gets_a_delivery_secret_that_is_never_shown(
    gateway: Gateway,
) -> None:
    await gateway.deploy("hello-world")
    execution_id = await gateway.start("hello-world", input={"name": "x"})
    (created,) = await gateway.store.read_events(execution_id)
    secret = created.event.delivery_secret  # type: ignore[union-attr]
    assert secret is not None
    assert len(secret) >= 32
    history = await gateway.client.get(f"/v1/executions/{execution_id}/history")
    view = await gateway.client.get(f"/v1/executions/{execution_id}")
    assert "delivery_secret" not in history.text
    assert secret not in history.text + view.text


async def test_no_history_view_or_console_page_shows_a_delivery_token_s_mac(
    gateway: Gateway,
) -> None:
    await gateway.deploy("hello-world")
    execution_id = await gateway.start("hello-world", input={"name": "x"})
    hello = compile_definition(example("hello-world"))
    created = replay(e.event for e in await gateway.store.read_events(execution_id))
    _, decided = decide_until_stable(created, hello.ir, now=1_000)
    (dispatched,) = [e for e in decided if isinstance(e, StepDispatched)]
    token, unit = dispatched.token, dispatched.unit
    named, _, mac = token.rpartition(".")
    assert named == f"{execution_id}:{unit}:1"
    assert len(mac) >= 20
    # Every event that names a delivery: each would hand the token to any reader.
    await gateway.append(
        execution_id,
        *decided,
        AttemptAlive(unit=unit, token=token, started=True),
        TimerFired(key=f"timeout:{token}"),
        StaleResultIgnored(unit=unit, token=token, reason="a test"),
        StepAttemptUncertain(unit=unit, token=token, reason="a test"),
    )
    history = await gateway.client.get(f"/v1/executions/{execution_id}/history")
    view = await gateway.client.get(f"/v1/executions/{execution_id}")
    page = await gateway.client.get(f"/ui/executions/{execution_id}")
    assert page.status_code == 200
    for answer in (history, view, page):
        assert mac not in answer.text
    shown = {e["type"]: e["data"] for e in history.json()}
    assert shown["StepDispatched"]["token"] == named
    assert shown["TimerFired"]["key"] == f"timeout:{named}"
    for kind in ("AttemptAlive", "StaleResultIgnored", "StepAttemptUncertain"):
        assert shown[kind]["token"] == named


async def test_queries_read_the_state(gateway: Gateway) -> None:
    queried = QUERIES.replace("NESTED", "[" * 70 + "1" + "]" * 70)
    response = await gateway.client.post("/v1/definitions", content=queried, headers=YAML)
    assert response.status_code == 201
    execution_id = await gateway.start("queried", input={})
    queries = f"/v1/executions/{execution_id}/queries"
    assert (await gateway.client.get(f"{queries}/greeting")).json() == {"value": None}
    status, code, message = error_of(await gateway.client.get(f"{queries}/nope"))
    assert (status, code) == (404, "UNKNOWN_QUERY")
    assert "broken, greeting, nested" in message
    failed = await gateway.client.get(f"{queries}/broken")
    assert error_of(failed)[:2] == (422, "QUERY_FAILED")
    # An expression may nest deeper than a stored value may: refused, not sent.
    status, code, message = error_of(await gateway.client.get(f"{queries}/nested"))
    assert (status, code) == (422, "QUERY_FAILED")
    assert "nested deeper than 64 levels" in message
    assert error_of(await gateway.client.get("/v1/executions/x/queries/a"))[1] == "NOT_FOUND"


# -- reading -------------------------------------------------------------------


async def test_the_view_shows_each_step_and_the_history_each_event(gateway: Gateway) -> None:
    await gateway.deploy("fan-out")
    fan_out = compile_definition(example("fan-out"))
    execution_id = await gateway.start("fan-out", input={"numbers": [1, 2, 3, 4, 5, 6]})
    created = replay(e.event for e in await gateway.store.read_events(execution_id))
    _, decided = decide_until_stable(created, fan_out.ir, now=1_000)
    await gateway.append(execution_id, *decided)

    view = (await gateway.client.get(f"/v1/executions/{execution_id}")).json()
    assert view["workflow"] == "fan-out"
    assert view["status"] == "running"
    assert view["input"] == {"numbers": [1, 2, 3, 4, 5, 6]}
    assert (view["output"], view["error"], view["parent"], view["closed_at"]) == (None,) * 4
    assert view["created_at"]
    assert view["steps"]["squares"] == {
        "status": "scheduled",
        "attempt": 0,
        "output": None,
        "error": None,
        "elements": {"dispatched": 4, "pending": 2},
        "kind": "for",
        "waiting_for": {
            "kind": "elements",
            "total": 6,
            "counts": {"dispatched": 4, "pending": 2},
            "task": "square@1",
            "workers_online": 0,
            "held": 0,
        },
    }
    assert view["steps"]["total"] == {
        "status": "pending",
        "attempt": 0,
        "output": None,
        "error": None,
        "kind": "task",
        "waiting_for": {"kind": "dependencies", "steps": ["squares"]},
    }
    assert [wait["step"] for wait in view["waiting_for"]] == ["squares"]

    history = (await gateway.client.get(f"/v1/executions/{execution_id}/history")).json()
    assert [h["seq"] for h in history] == list(range(1, 2 + len(decided)))
    assert [h["type"] for h in history] == ["WorkflowCreated", *(e.type for e in decided)]
    assert history[0]["data"]["input"] == {"numbers": [1, 2, 3, 4, 5, 6]}
    assert error_of(await gateway.client.get("/v1/executions/ghost"))[:2] == (404, "NOT_FOUND")
    history_of_ghost = await gateway.client.get("/v1/executions/ghost/history")
    assert error_of(history_of_ghost)[:2] == (404, "NOT_FOUND")


async def test_a_finished_execution_shows_its_outcome(gateway: Gateway) -> None:
    await gateway.deploy("hello-world")
    execution_id = await gateway.start("hello-world")
    failure = TaskFailure(code="BOOM", message="it broke", retryable=False)
    await gateway.append(execution_id, WorkflowFailed(error=failure))
    view = (await gateway.client.get(f"/v1/executions/{execution_id}")).json()
    assert view["status"] == "failed"
    assert view["error"] == {
        "code": "BOOM",
        "message": "it broke",
        "retryable": False,
        "details": None,
    }
    assert view["closed_at"] is not None


async def test_listing_pages_newest_first_and_filters(gateway: Gateway) -> None:
    await gateway.deploy("hello-world", "fan-out")
    client = gateway.client
    hellos = [await gateway.start("hello-world", execution_id=f"h-{i}") for i in range(5)]
    fans = [await gateway.start("fan-out", input={"numbers": []}) for _ in range(2)]
    await gateway.append("h-1", WorkflowCompleted(output=None))

    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 3} | ({"cursor": cursor} if cursor else {})
        page = (await client.get("/v1/executions", params=params)).json()
        assert len(page["items"]) <= 3
        seen += [item["execution_id"] for item in page["items"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3
    assert seen == [*reversed(hellos + fans)]

    by_workflow = (await client.get("/v1/executions", params={"workflow": "fan-out"})).json()
    assert [i["execution_id"] for i in by_workflow["items"]] == [*reversed(fans)]
    assert by_workflow["next_cursor"] is None
    done = (await client.get("/v1/executions", params={"status": "completed"})).json()
    assert [(i["execution_id"], i["status"]) for i in done["items"]] == [("h-1", "completed")]
    summary = done["items"][0]
    assert set(summary) == {
        "execution_id",
        "workflow",
        "version",
        "status",
        "parent",
        "created_at",
        "closed_at",
    }

    for params in ({"cursor": "not-a-cursor"}, {"status": "sleeping"}, {"limit": 0}):
        response = await client.get("/v1/executions", params=params)
        assert error_of(response)[:2] == (400, "INVALID_REQUEST"), params


async def test_waiting_answers_when_the_execution_ends(gateway: Gateway) -> None:
    await gateway.deploy("hello-world")
    execution_id = await gateway.start("hello-world")
    started = time.monotonic()
    waiting = asyncio.ensure_future(
        gateway.client.get(f"/v1/executions/{execution_id}", params={"wait": 40})
    )
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(asyncio.shield(waiting), timeout=0.3)  # still waiting
    await gateway.append(execution_id, WorkflowCompleted(output={"greeting": "hi"}))
    response = await waiting
    assert response.json()["status"] == "completed"
    assert response.json()["output"] == {"greeting": "hi"}
    # Woken by the ending, long before the 40 s it was asked to wait (generous: a
    # loaded machine is slow, but not that slow).
    assert time.monotonic() - started < 30


async def test_a_wait_is_woken_by_the_ending_not_by_polling(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    await gateway.deploy("hello-world")
    execution_id = await gateway.start("hello-world")
    reads: list[str] = []
    read_row = gateway.store.execution

    async def counted(wanted: str) -> ExecutionRow | None:
        reads.append(wanted)
        return await read_row(wanted)

    monkeypatch.setattr(gateway.store, "execution", counted)
    waiting = asyncio.ensure_future(
        gateway.client.get(f"/v1/executions/{execution_id}", params={"wait": 30})
    )
    while gateway.executions.endings.waiting == 0:
        await asyncio.sleep(0.01)
    await asyncio.sleep(1.0)  # polling would have read the row again by now (every 20-250 ms)
    assert reads == [execution_id]
    await gateway.append(execution_id, WorkflowCompleted(output={"greeting": "hi"}))
    response = await asyncio.wait_for(waiting, 10)
    assert response.json()["status"] == "completed"
    assert reads == [execution_id, execution_id]  # woken once, read once more
    assert gateway.executions.endings.waiting == 0


async def test_a_wait_longer_than_the_setting_is_answered_after_it(orbit_env: OrbitEnv) -> None:
    async with running(orbit_env, orbit_env.settings_with(max_wait_seconds=0.5)) as gateway:
        await gateway.deploy("hello-world")
        execution_id = await gateway.start("hello-world")
        t0 = time.monotonic()
        response = await gateway.client.get(f"/v1/executions/{execution_id}?wait=30")
        held = time.monotonic() - t0
    assert response.status_code == 200
    assert response.json()["status"] == "running"
    assert 0.5 <= held < 20, held  # after the setting, long before the 30 s asked


async def test_every_gateway_replica_hears_an_ending(orbit_env: OrbitEnv) -> None:
    async with (
        running(orbit_env, orbit_env.settings) as first,
        running(orbit_env, orbit_env.settings) as second,
    ):
        await first.deploy("hello-world")
        ids = [await first.start("hello-world") for _ in range(3)]
        waits = [
            asyncio.ensure_future(g.client.get(f"/v1/executions/{i}", params={"wait": 30}))
            for g in (first, second)
            for i in ids
        ]
        for replica in (first, second):
            while replica.executions.endings.waiting < len(ids):
                await asyncio.sleep(0.01)
        for execution_id in ids:
            await first.append(execution_id, WorkflowCompleted(output={"greeting": "hi"}))
        answers = await asyncio.wait_for(asyncio.gather(*waits), 10)
        assert [a.json()["status"] for a in answers] == ["completed"] * 6


async def test_a_wait_still_answers_while_the_listener_is_lost(gateway: Gateway) -> None:
    await gateway.deploy("hello-world")
    execution_id = await gateway.start("hello-world")
    waiting = asyncio.ensure_future(
        gateway.client.get(f"/v1/executions/{execution_id}", params={"wait": 30})
    )
    while gateway.executions.endings.waiting == 0:
        await asyncio.sleep(0.01)
    killer = await asyncpg.connect(gateway.env.settings.database_url)
    try:
        killed = await killer.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = $1 AND datname = current_database()",
            ENDINGS_LISTENER_NAME,
        )
    finally:
        await killer.close()
    assert killed == 1
    # Whether it ends while the listener is away (the wait polls) or after it is
    # back (which wakes every wait), the wait answers.
    await gateway.append(execution_id, WorkflowCompleted(output={"greeting": "hi"}))
    response = await asyncio.wait_for(waiting, 10)
    assert response.json()["status"] == "completed"


async def test_waiting_answers_at_the_timeout(gateway: Gateway) -> None:
    await gateway.deploy("hello-world")
    execution_id = await gateway.start("hello-world")
    started = time.monotonic()
    response = await gateway.client.get(f"/v1/executions/{execution_id}", params={"wait": 0.3})
    elapsed = time.monotonic() - started
    assert response.json()["status"] == "running"
    assert 0.3 <= elapsed < 10  # never early; late only by a loaded machine's slowness
    negative = await gateway.client.get(f"/v1/executions/{execution_id}", params={"wait": -1})
    assert error_of(negative)[:2] == (400, "INVALID_REQUEST")


async def test_workers_are_grouped_with_their_live_sessions(gateway: Gateway) -> None:
    sessions = gateway.store.sessions
    contract = {"task": "greet", "version": "1", "input_schema": {"type": "object"}}
    request = RegisterWorker(worker_id="billing-1", sdk="orbit-python/0.1", contracts=(contract,))
    live = await sessions.open(request)
    await sessions.open(request)
    gone = await sessions.open(RegisterWorker(worker_id="old-1", contracts=()))
    await sessions.touch(live, [InflightTask(execution_id="e", token="t1")])
    await sessions.close(gone)

    workers = (await gateway.client.get("/v1/workers")).json()
    assert [w["worker_id"] for w in workers] == ["billing-1", "old-1"]
    billing, old = workers
    assert billing["online"] is True
    assert (billing["sessions"], billing["inflight"]) == (2, 1)
    assert (billing["runtime"], billing["sdk"]) == ("python", "orbit-python/0.1")
    assert billing["contracts"] == [{"task": "greet", "version": "1"}]
    assert (old["online"], old["sessions"], old["inflight"]) == (False, 0, 0)
    assert old["last_seen"]


# -- health, errors, the document ----------------------------------------------


async def test_health_and_readiness(gateway: Gateway, orbit_env: OrbitEnv) -> None:
    healthy = (await gateway.client.get("/healthz")).json()
    assert healthy == {"status": "ok", "checks": {}, "warnings": []}
    ready = await gateway.client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"postgres": "ok", "rabbitmq": "ok"}
    # These tests run with ORBIT_AUTH=disabled, and /readyz says so every time.
    assert ready.json()["warnings"] == [AUTH_DISABLED_WARNING]

    connection: AbstractRobustConnection = await connect(orbit_env.settings.amqp_url)
    await connection.close()
    app = create_app(
        gateway.executions,
        {"postgres": gateway.store.ping, "rabbitmq": lambda: broker_ready(connection)},
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=local_url(orbit_env.settings)
    ) as c:
        status, code, message = error_of(await c.get("/readyz"))
    assert (status, code) == (503, "UNAVAILABLE")
    assert "rabbitmq" in message
    assert "postgres" not in message


async def test_unexpected_errors_are_a_500_without_a_traceback(
    gateway: Gateway,
    orbit_env: OrbitEnv,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The 503s' log throttle on a clock that stands still: one line per cause per 10 s
    # is then one line, however long the requests below take on a loaded machine.
    monkeypatch.setattr(
        gateway_errors, "LogThrottle", lambda logger: LogThrottle(logger, clock=lambda: 0.0)
    )

    class Broken(EventStore):
        async def list_definitions(self) -> list[DefinitionRow]:
            raise RuntimeError("a bug, not an input")

    store = await Broken.connect(orbit_env.settings.database_url, min_size=1, max_size=1)
    await store.close()  # and every query now fails: Postgres is unavailable
    relay = gateway.executions.relay
    app = create_app(Executions(store, relay, orbit_env.topology, orbit_env.settings))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=local_url(orbit_env.settings)
    ) as c:
        unavailable = await c.get("/v1/workers")
        assert error_of(unavailable)[:2] == (503, "UNAVAILABLE")
        assert unavailable.headers["Retry-After"] == "2"
        for _ in range(20):  # an outage is logged once a while, not once a request
            await c.get("/v1/workers")
        outage = [r for r in caplog.records if getattr(r, "action", None) == "http.unavailable"]
        assert len(outage) == 1
        response = await c.get("/v1/definitions")
        assert error_of(response)[:2] == (500, "INTERNAL")
        assert "Traceback" not in response.text
        assert "asyncpg" not in response.text
        logged = [r for r in caplog.records if getattr(r, "action", None) == "http.internal_error"]
        assert len(logged) == 1
        assert logged[0].exc_info is not None
        assert error_of(await c.get("/v1/nothing-here"))[:2] == (404, "NOT_FOUND")
        assert error_of(await c.delete("/v1/definitions"))[:2] == (405, "INVALID_REQUEST")


async def test_an_internal_error_is_logged_and_its_cause_kept_from_the_client(
    gateway: Gateway, orbit_env: OrbitEnv, caplog: pytest.LogCaptureFixture
) -> None:
    class Refusing(EventStore):
        async def list_definitions(self) -> list[DefinitionRow]:
            # What the store makes of a statement Postgres refuses for no fault of the input.
            raise OrbitError(ErrorCode.INTERNAL, "Postgres refused a statement: secret detail")

    store = await Refusing.connect(orbit_env.settings.database_url, min_size=1, max_size=1)
    try:
        relay = gateway.executions.relay
        app = create_app(Executions(store, relay, orbit_env.topology, orbit_env.settings))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url=local_url(orbit_env.settings)
        ) as client:
            status, code, message = error_of(await client.get("/v1/definitions"))
    finally:
        await store.close()
    assert (status, code) == (500, "INTERNAL")
    assert "secret detail" not in message
    logged = [r for r in caplog.records if getattr(r, "action", None) == "http.internal_error"]
    assert len(logged) == 1
    assert "secret detail" in logged[0].getMessage()


async def test_the_openapi_document_lists_every_path(gateway: Gateway) -> None:
    document = (await gateway.client.get("/openapi.json")).json()
    assert set(document["paths"]) >= {
        "/v1/definitions",
        "/v1/definitions/{name}/{version}",
        "/v1/executions",
        "/v1/executions/{execution_id}",
        "/v1/executions/{execution_id}/history",
        "/v1/executions/{execution_id}/cancel",
        "/v1/executions/{execution_id}/signals/{name}",
        "/v1/executions/{execution_id}/queries/{name}",
        "/v1/workers",
        "/healthz",
        "/readyz",
    }
    register = document["paths"]["/v1/definitions"]["post"]
    assert set(register["requestBody"]["content"]) == {"application/yaml", "application/json"}
    responses = [
        r for path in document["paths"].values() for op in path.values() for r in op["responses"]
    ]
    assert "422" not in responses


# -- the service ---------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def ask_command(
    publisher: Publisher,
    topology: Topology,
    replies: AbstractQueue,
    body: bytes,
    correlation_id: str,
) -> CommandReply:
    """Publish a command ``body`` to the gateway's intake; its reply, read from ``replies``."""
    await publisher.publish(
        topology.commands, "command", body, reply_to=replies.name, correlation_id=correlation_id
    )
    message = await _next_message(replies)
    assert message.correlation_id == correlation_id
    return CommandReply.model_validate_json(message.body)


async def test_the_service_serves_http_and_answers_commands(orbit_env: OrbitEnv) -> None:
    settings = orbit_env.settings_with(http_port=_free_port())
    service = GatewayService(settings)
    await service.start()
    try:
        base = f"http://127.0.0.1:{service.port}"
        async with httpx.AsyncClient(base_url=base) as client:
            assert (await client.get("/readyz")).status_code == 200
            deployed = await client.post(
                "/v1/definitions", content=example("hello-world"), headers=YAML
            )
            assert deployed.status_code == 201

        connection = await connect(settings.amqp_url)
        try:
            channel = await open_channel(connection)
            replies = await channel.declare_queue(exclusive=True)
            publisher = Publisher(channel)
            topology = orbit_env.topology

            async def ask(body: bytes, correlation_id: str) -> CommandReply:
                return await ask_command(publisher, topology, replies, body, correlation_id)

            start = StartExecution(workflow="hello-world", execution_id="by-amqp")
            reply = await ask(encode(start), "c-1")
            assert reply.ok
            assert reply.result == {"execution_id": "by-amqp", "created": True}
            async with httpx.AsyncClient(base_url=base) as client:
                view = (await client.get("/v1/executions/by-amqp")).json()
            assert view["status"] == "running"

            signalled = await ask(encode(SignalExecution(execution_id="by-amqp", name="go")), "c-3")
            assert signalled.error is not None
            assert signalled.error.code == "UNKNOWN_SIGNAL"
            cancelled = await ask(encode(CancelExecution(execution_id="by-amqp")), "c-4")
            assert cancelled.ok
            async with httpx.AsyncClient(base_url=base) as client:
                history = (await client.get("/v1/executions/by-amqp/history")).json()
            assert [h["type"] for h in history] == ["WorkflowCreated", "CancelRequested"]

            refused = await ask(encode(StartExecution(workflow="nope")), "c-2")
            assert not refused.ok
            assert refused.error is not None
            assert refused.error.code == "WORKFLOW_NOT_FOUND"

            await publisher.publish(topology.commands, "command", b'{"type": "Explode"}')
            parked = await _next_message(await channel.get_queue(topology.dead_letter))
            assert json.loads(parked.body) == {"type": "Explode"}
        finally:
            await connection.close()
    finally:
        await service.stop()
    async with httpx.AsyncClient(base_url=base) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get("/healthz")


async def test_a_command_that_fails_inside_orbit_is_given_back_then_parked(
    orbit_env: OrbitEnv,
) -> None:
    class Refusing:
        """Executions whose store refuses every statement, for no fault of the command."""

        calls = 0

        async def handle(self, command: object, message_id: str | None = None) -> object:
            self.calls += 1
            raise OrbitError(ErrorCode.INTERNAL, "Postgres refused a statement")

    topology = orbit_env.topology
    connection = await connect(orbit_env.settings.amqp_url)
    try:
        channel = await open_channel(connection)
        await declare_topology(channel, topology)
        publisher = Publisher(channel)
        refusing = Refusing()
        intake = CommandIntake(cast(Executions, refusing), publisher)
        consuming = await open_channel(connection, prefetch=1)
        commands = await consuming.declare_queue(topology.commands, passive=True)
        await commands.consume(intake.on_message)
        await publisher.publish(
            topology.commands, "command", encode(StartExecution(workflow="refused"))
        )
        # Tried again (not acked as a refusal), and parked once it keeps failing.
        parked = await _next_message(await channel.get_queue(topology.dead_letter))
        assert StartExecution.model_validate_json(parked.body).workflow == "refused"
        assert refusing.calls == PARK_AFTER
    finally:
        await connection.close()


async def test_the_service_does_not_start_on_a_port_in_use(orbit_env: OrbitEnv) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        settings = orbit_env.settings_with(http_port=taken.getsockname()[1])
        service = GatewayService(settings)
        with pytest.raises(OrbitError) as refused:
            await service.start()
    assert refused.value.code is ErrorCode.UNAVAILABLE
    assert f"127.0.0.1:{settings.http_port}" in refused.value.message
    await service.stop()  # a second stop after a failed start is harmless


async def test_the_newest_version_is_read_once_a_second_and_at_once_after_a_deploy(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    await gateway.deploy("hello-world")
    registry = gateway.executions.registry
    reads: list[str] = []
    versions = registry.store.definition_versions

    async def counted(name: str) -> list[str]:
        reads.append(name)
        return await versions(name)

    monkeypatch.setattr(registry.store, "definition_versions", counted)
    for _ in range(5):
        assert (await registry.resolve("hello-world", None)).ir.version == "1.0.0"
    assert reads == ["hello-world"]  # remembered
    newer = (EXAMPLES / "hello-world.yaml").read_text().replace("1.0.0", "1.1.0")
    await gateway.executions.register(newer.encode(), "application/yaml")
    assert (await registry.resolve("hello-world", None)).ir.version == "1.1.0"  # at once
    assert reads == ["hello-world", "hello-world"]


async def test_a_nul_or_a_lone_surrogate_anywhere_is_a_bad_request(gateway: Gateway) -> None:
    await gateway.deploy("hello-world")
    order = await gateway.start("hello-world", input={"name": "x"})
    client = gateway.client
    answers = [
        await client.get("/v1/executions/a%00b"),
        await client.get("/v1/executions", params={"workflow": "a\x00b"}),
        await client.post("/v1/executions", json={"workflow": "a\x00b"}),
        await client.post("/v1/executions", json={"workflow": "hello-world", "version": "1\x00"}),
    ]
    surrogates = [
        ("/v1/executions", b'{"workflow": "hello-world", "version": "\\ud800"}'),
        ("/v1/executions", b'{"workflow": "hello-world", "input": {"name": "\\ud800"}}'),
        ("/v1/executions", b'{"workflow": "hello-world", "input": {"\\ud800": 1}}'),
        (f"/v1/executions/{order}/cancel", b'{"reason": "\\ud800"}'),
    ]
    for path, body in surrogates:
        answers.append(await client.post(path, content=body, headers=JSON))
    assert [error_of(answer)[:2] for answer in answers] == [(400, "INVALID_REQUEST")] * 8
    assert len(await gateway.store.read_events(order)) == 1


async def test_a_host_the_gateway_does_not_serve_is_refused_but_probes_answer(
    gateway: Gateway,
) -> None:
    rebound = {"host": "attacker.example:8080"}
    answer = await gateway.client.get("/v1/executions", headers=rebound)
    assert error_of(answer)[:2] == (421, "INVALID_REQUEST")
    assert "ORBIT_HTTP_ALLOWED_HOSTS" in error_of(answer)[2]
    posted = await gateway.client.post(
        "/v1/definitions", content=example("hello-world"), headers={**YAML, **rebound}
    )
    assert posted.status_code == 421
    assert await gateway.store.list_definitions() == []
    assert (await gateway.client.get("/healthz", headers=rebound)).status_code == 200


# -- batch starts ----------------------------------------------------------------


async def test_a_start_that_differs_from_the_recorded_one_is_refused_naming_what(
    gateway: Gateway,
) -> None:
    await gateway.deploy("hello-world", "fan-out")
    client = gateway.client
    first = {"workflow": "hello-world", "execution_id": "o-1", "input": {"name": "world"}}
    assert (await client.post("/v1/executions", json=first)).status_code == 201
    # The input as recorded, with its defaults: leaving out a defaulted field repeats it.
    same = {"workflow": "hello-world", "execution_id": "o-1"}
    assert (await client.post("/v1/executions", json=same)).json()["created"] is False

    other_input = {**first, "input": {"name": "ada"}}
    status, code, message = error_of(await client.post("/v1/executions", json=other_input))
    assert (status, code) == (409, "EXECUTION_EXISTS")
    assert "another input" in message
    assert "use_existing" in message
    existing = {**other_input, "on_conflict": "use_existing"}
    answer = await client.post("/v1/executions", json=existing)
    assert (answer.status_code, answer.json()) == (200, {"execution_id": "o-1", "created": False})

    other_workflow = {"workflow": "fan-out", "execution_id": "o-1", "input": {"numbers": []}}
    for body in (other_workflow, {**other_workflow, "on_conflict": "use_existing"}):
        status, code, message = error_of(await client.post("/v1/executions", json=body))
        assert (status, code) == (409, "EXECUTION_EXISTS")
        assert "another workflow" in message

    # A newer version is now the default: a start naming no version is not a repeat,
    # and the message says which version to name (not "a different workflow").
    newer = example("hello-world").replace("version: 1.0.0", "version: 1.1.0")
    assert (await client.post("/v1/definitions", content=newer, headers=YAML)).status_code == 201
    status, code, message = error_of(await client.post("/v1/executions", json=first))
    assert (status, code) == (409, "EXECUTION_EXISTS")
    assert "at version 1.0.0, not 1.1.0" in message
    assert "name version 1.0.0" in message
    pinned = {**first, "version": "1.0.0"}
    assert (await client.post("/v1/executions", json=pinned)).json()["created"] is False

    # A batch holds each start to the same rule, against the stored one or an earlier item.
    items = [
        other_input,
        {**first, "execution_id": "o-2", "version": "1.0.0"},
        {**first, "execution_id": "o-2", "version": "1.1.0"},
    ]
    response = await client.post("/v1/executions/batch", json={"executions": items})
    results = response.json()["results"]
    assert [r.get("error", {}).get("code") for r in results] == [
        "EXECUTION_EXISTS", None, "EXECUTION_EXISTS"
    ]  # fmt: skip
    assert "at version 1.0.0, not 1.1.0" in results[2]["error"]["message"]
    # An id given twice is held to the start it has, stored, whatever its first line said.
    items = [{**existing, "version": "1.0.0"}, {**other_input, "version": "1.0.0"}, pinned]
    response = await client.post("/v1/executions/batch", json={"executions": items})
    results = response.json()["results"]
    assert [r.get("error", {}).get("code") for r in results] == [None, "EXECUTION_EXISTS", None]
    assert [r["created"] for r in results] == [False, False, False]
    assert len(await gateway.store.read_events("o-1")) >= 1
    view = (await client.get("/v1/executions/o-1")).json()
    assert view["input"] == {"name": "world"}


async def test_a_batch_start_answers_each_item_in_order(gateway: Gateway) -> None:
    await gateway.deploy("hello-world", "fan-out")
    await gateway.start("hello-world", execution_id="known")
    await gateway.start("fan-out", execution_id="fan", input={"numbers": [1]})
    items: list[Any] = [
        {"workflow": "hello-world", "execution_id": "b-1", "input": {"name": "ada"}},
        {"workflow": "hello-world", "execution_id": "known"},
        {"workflow": "no-such", "execution_id": "b-2"},
        {"execution_id": "b-3"},
        {"workflow": "hello-world", "execution_id": "b-1", "input": {"name": "ada"}},
        {"workflow": "hello-world", "execution_id": "b-4", "input": {"name": 5}},
        {"workflow": "hello-world", "execution_id": "fan"},
        {"workflow": "hello-world"},
        {"workflow": "hello-world", "execution_id": "not an id"},
        "not an object",
    ]
    response = await gateway.client.post("/v1/executions/batch", json={"executions": items})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert len(results) == len(items)
    codes = [r.get("error", {}).get("code") for r in results]
    assert codes == [
        None,
        None,
        "WORKFLOW_NOT_FOUND",
        "INVALID_REQUEST",
        None,
        "INVALID_INPUT",
        "EXECUTION_EXISTS",
        None,
        "INVALID_EXECUTION_ID",
        "INVALID_REQUEST",
    ]
    assert [r["created"] for r in results] == [
        True, False, False, False, False, False, False, True, False, False
    ]  # fmt: skip
    assert [r["execution_id"] for r in results[:7]] == [
        "b-1", "known", "b-2", "b-3", "b-1", "b-4", "fan"
    ]  # fmt: skip
    assert "executions[3]" in results[3]["error"]["message"]
    assert results[9]["execution_id"] is None
    generated = results[7]["execution_id"]
    # Each one started is durable, with its history, and its wake was published.
    for execution_id in ("b-1", generated):
        view = (await gateway.client.get(f"/v1/executions/{execution_id}")).json()
        assert view["status"] == "running"
    assert (await gateway.client.get("/v1/executions/b-1")).json()["input"] == {"name": "ada"}
    missing = await gateway.client.get("/v1/executions/b-4")
    assert missing.status_code == 404

    again = await gateway.client.post("/v1/executions/batch", json={"executions": items[:2]})
    assert [r["created"] for r in again.json()["results"]] == [False, False]  # idempotent


async def test_a_batch_start_is_refused_whole_only_for_its_shape(gateway: Gateway) -> None:
    await gateway.deploy("hello-world")
    too_many = [{"workflow": "hello-world"}] * 1001
    response = await gateway.client.post("/v1/executions/batch", json={"executions": too_many})
    assert error_of(response)[:2] == (400, "INVALID_REQUEST")
    for body in ({}, {"executions": "x"}, {"executions": [], "more": 1}):
        response = await gateway.client.post("/v1/executions/batch", json=body)
        assert error_of(response)[:2] == (400, "INVALID_REQUEST"), body
    empty = await gateway.client.post("/v1/executions/batch", json={"executions": []})
    assert empty.json() == {"results": []}
    listed = await gateway.client.get("/v1/executions")
    assert listed.json()["items"] == []


async def test_a_batch_start_refuses_what_exceeds_the_active_limit(orbit_env: OrbitEnv) -> None:
    settings = orbit_env.settings_with(max_active_executions=2)
    async with running(orbit_env, settings) as gateway:
        await gateway.deploy("hello-world")
        await gateway.start("hello-world", execution_id="first")
        items = [{"workflow": "hello-world", "execution_id": f"b-{i}"} for i in range(3)]
        items.append({"workflow": "hello-world", "execution_id": "first"})
        response = await gateway.client.post("/v1/executions/batch", json={"executions": items})
        results = response.json()["results"]
        assert [r["created"] for r in results] == [True, False, False, False]
        assert [r.get("error", {}).get("code") for r in results] == [
            None,
            "RESOURCE_EXHAUSTED",
            "RESOURCE_EXHAUSTED",
            None,  # a repeat is answered even when full
        ]


async def test_a_large_batch_is_written_whole_and_woken(gateway: Gateway) -> None:
    await gateway.deploy("hello-world")
    items = [{"workflow": "hello-world", "execution_id": f"big-{i}"} for i in range(1000)]
    response = await gateway.client.post("/v1/executions/batch", json={"executions": items})
    results = response.json()["results"]
    assert [r["execution_id"] for r in results] == [f"big-{i}" for i in range(1000)]
    assert all(r["created"] for r in results)
    database = gateway.database
    assert await database.fetchval("SELECT count(*) FROM executions") == 1000
    assert await database.fetchval("SELECT count(*) FROM history") == 1000
    # Every wake was published (published rows are deleted by the flush).
    assert await gateway.store.outbox.flush_published() == 1000
    assert await database.fetchval("SELECT count(*) FROM outbox") == 0
