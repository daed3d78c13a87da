"""The broker's trust boundary, probed as an outsider holding a worker's or a client's login.

Each probe of the outside check that found the broker trusted as a whole is
repeated here against a stack with a RabbitMQ user per role (real users,
made for the test and deleted after it): the broker refuses what the
permissions forbid, and the consumers drop, and count, what a role may not
send.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aio_pika
import aiormq
import pytest
from prometheus_client import REGISTRY

from orbit_model.broker_roles import Role
from orbit_model.events import TaskFailure
from orbit_model.messages import (
    ContractAnnouncement,
    DeliveryLost,
    RegisterWorker,
    TaskResult,
    TimerDue,
    encode,
)
from orbit_model.topology import Topology
from orbit_model.views import view_json
from orbit_sdk import TaskContext, task
from orbit_services.commands.broker_setup import BrokerAdmin, add_user, with_login
from orbit_services.store import EventStore
from tests.integration.conftest import OrbitEnv
from tests.integration.eventually import eventually
from tests.views import as_sent

from .stack import Stack, running_stack

HELD = """
orbit: 1
workflow: held
version: 1.0.0
tasks:
  hold: {version: "1"}
steps:
  - id: a
    task: hold
"""

WAITING = """
orbit: 1
workflow: waiting
version: 1.0.0
timeout: 2h
signals:
  go: {type: object}
steps:
  - id: approval
    await: go
    timeout: 1h
"""

release = asyncio.Event()
"""Set to let ``hold`` finish: made anew for each test, in its event loop."""
deliveries: list[str] = []


@task("hold", version="1")
async def hold(_input: Any, ctx: TaskContext) -> dict[str, Any]:
    deliveries.append(ctx.token)
    await release.wait()
    return {"real": True}


@pytest.fixture
async def stack(orbit_env: OrbitEnv) -> AsyncIterator[Stack]:
    global release  # noqa: PLW0603 - one per test, bound to the test's event loop
    release = asyncio.Event()
    deliveries.clear()
    async with running_stack(orbit_env.settings, [hold]) as running:
        await running.client.deploy(HELD, WAITING)
        yield running
    release.set()


def _refused(reason: str, message_type: str, consumer: str = "decider") -> float:
    labels = {"consumer": consumer, "message_type": message_type, "reason": reason}
    return REGISTRY.get_sample_value("orbit_messages_refused_total", labels) or 0.0


async def _publish(url: str, exchange: str, routing_key: str, body: bytes, **props: Any) -> None:
    """Publish one message as the login of ``url``, confirmed; raises what the broker says."""
    connection = await aio_pika.connect(url)
    try:
        channel = await connection.channel(publisher_confirms=True)
        target = await channel.get_exchange(exchange, ensure=False) if exchange else None
        message = aio_pika.Message(body, **props)
        if target is None:
            await channel.default_exchange.publish(message, routing_key)
        else:
            await target.publish(message, routing_key)
    finally:
        await connection.close()


async def _as_worker(stack: Stack, route_key: str, message: Any) -> None:
    """What a worker may do: publish to NS.results, with its own user_id."""
    worker = stack.as_user("worker").amqp_url
    user = aio_pika.connection.make_url(worker).user
    await _publish(worker, stack.topology.results, route_key, encode(message), user_id=user)


async def _until(predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.05)


async def _dispatched(stack: Stack, execution_id: str) -> None:
    await stack.client.start("held", None, execution_id=execution_id)
    await _until(lambda: len(deliveries) == 1)


# -- the broker refuses --------------------------------------------------------------------


async def test_a_worker_user_may_not_publish_to_the_decider_exchange(stack: Stack) -> None:
    forged = TaskResult(execution_id="x", token="x:a:1", output={"pwned": True})
    with pytest.raises(aiormq.exceptions.ChannelAccessRefused, match="ACCESS_REFUSED"):
        await _publish(
            stack.as_user("worker").amqp_url, stack.topology.decider, "0", encode(forged)
        )


async def test_worker_and_client_users_may_not_read_task_inputs_nor_parked_messages(
    stack: Stack,
) -> None:
    await stack.client.start("waiting", None, execution_id="w-0")  # task queues exist
    topology: Topology = stack.topology
    settings = stack.settings
    async with BrokerAdmin.from_settings(settings) as admin:
        name, password = await add_user(admin, topology, Role.WORKER, "payments", tasks=["pay*"])
    payments_worker = with_login(settings.amqp_url, name, password)
    probes = [
        (stack.as_user("client").amqp_url, topology.task_queue("hold", "1")),
        (payments_worker, topology.task_queue("hold", "1")),
        (stack.as_user("worker").amqp_url, topology.dead_letter),
        (stack.as_user("client").amqp_url, topology.dead_letter),
        (stack.as_user("worker").amqp_url, topology.decider_queue(0)),
    ]
    for url, queue in probes:
        connection = await aio_pika.connect(url)
        try:
            channel = await connection.channel()
            target = await channel.declare_queue(queue, passive=True)
            with pytest.raises(aiormq.exceptions.ChannelAccessRefused, match="ACCESS_REFUSED"):
                await target.get(no_ack=False, fail=False)  # the probe's basic.get
        finally:
            await connection.close()


async def test_a_message_whose_user_id_names_another_user_is_refused_by_the_broker(
    stack: Stack,
) -> None:
    await _dispatched(stack, "h-uid")
    token = deliveries[0]
    # The client may write to NS.commands; it pretends to be the worker, with a real token.
    real = TaskResult(execution_id="h-uid", token=token, output={"pwned": True})
    worker_user = aio_pika.connection.make_url(stack.as_user("worker").amqp_url).user
    with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed, match="user_id"):
        await _publish(
            stack.as_user("client").amqp_url,
            stack.topology.commands,
            "command",
            encode(real),
            user_id=worker_user,
        )
    release.set()
    done = view_json(await stack.client.wait("h-uid", timeout=30))
    assert done["status"] == "completed"
    assert done["steps"]["a"]["output"] == {"real": True}


# -- the consumers refuse ------------------------------------------------------------------


async def test_a_result_under_a_token_its_sender_never_received_is_ignored(stack: Stack) -> None:
    await _dispatched(stack, "h-forged")
    route = stack.topology.results_route("h-forged")
    for token in ("h-forged:a:1", "h-forged:a:1.AAAAAAAAAAAAAAAAAAAAAA"):
        await _as_worker(
            stack, route.routing_key, TaskResult(execution_id="h-forged", token=token, output={})
        )
    failure = TaskFailure(code="TASK_FAILED", message="forged")
    await _as_worker(
        stack,
        route.routing_key,
        TaskResult(execution_id="h-forged", token="h-forged:a:1", error=failure),
    )
    # The decider took all three: each recorded as stale, nothing else changed.
    await eventually(
        lambda: stack.client.history("h-forged"),
        lambda events: sum(e["type"] == "StaleResultIgnored" for e in events) == 3,
        timeout=30,
        what="the forged results recorded as stale",
    )
    execution = view_json(await stack.client.get("h-forged"))
    assert execution["status"] == "running"
    assert execution["steps"]["a"]["status"] == "dispatched"
    release.set()
    done = view_json(await stack.client.wait("h-forged", timeout=30))
    assert done["status"] == "completed"
    assert done["steps"]["a"]["output"] == {"real": True}
    assert len(deliveries) == 1


async def test_a_worker_user_whose_patterns_do_not_cover_the_task_cannot_answer_it(
    stack: Stack,
) -> None:
    """The probe's forgery: the token of a task (as the history showed it then) sent back
    by a worker user made with --tasks 'other.*', whose output the step took."""
    await _dispatched(stack, "h-other")
    settings, topology = stack.settings, stack.topology
    async with BrokerAdmin.from_settings(settings) as admin:
        name, password = await add_user(admin, topology, Role.WORKER, "other", tasks=["other.*"])
    store = await EventStore.connect(settings.database_url, min_size=1, max_size=1)
    try:
        await store.worker_users.record(name, ["other.*"])  # as `orbit broker user add` does
    finally:
        await store.close()
    other = with_login(settings.amqp_url, name, password)
    forged = TaskResult(execution_id="h-other", token=deliveries[0], output={"forged": "by evil"})
    route = topology.results_route("h-other")
    before = _refused("task_not_covered", "TaskResult")
    await _publish(other, topology.results, route.routing_key, encode(forged), user_id=name)
    await _until(lambda: _refused("task_not_covered", "TaskResult") == before + 1)
    execution = view_json(await stack.client.get("h-other"))
    assert execution["steps"]["a"]["status"] == "dispatched"
    release.set()
    done = view_json(await stack.client.wait("h-other", timeout=30))
    assert done["status"] == "completed"
    # The stack's own worker user, made as `orbit dev` makes it (patterns not recorded),
    # still answers every task it serves.
    assert done["steps"]["a"]["output"] == {"real": True}


def _parked_reports(message_type: str, outcome: str) -> float:
    labels = {"message_type": message_type, "outcome": outcome}
    return REGISTRY.get_sample_value("orbit_parked_reports_total", labels) or 0.0


async def test_a_client_s_result_parked_as_no_command_fails_no_attempt(stack: Stack) -> None:
    """The probe: a client user (who may only send commands) published result-shaped and
    timer-shaped bodies to NS.commands; parked there, they were reported to the execution,
    which failed with MESSAGE_PARKED and recorded a lost timer."""
    await _dispatched(stack, "h-parked")
    client = stack.as_user("client").amqp_url
    user = aio_pika.connection.make_url(client).user
    result = TaskResult(execution_id="h-parked", token=deliveries[0], output={})
    timer = TimerDue(execution_id="h-parked", key="workflow")
    before = {kind: _parked_reports(kind, "refused") for kind in ("TaskResult", "TimerDue")}
    for forged in (result, timer):
        await _publish(client, stack.topology.commands, "command", encode(forged), user_id=user)
    await _until(
        lambda: all(_parked_reports(kind, "refused") == before[kind] + 1 for kind in before)
    )
    execution = view_json(await stack.client.get("h-parked"))
    assert execution["status"] == "running"
    assert execution["steps"]["a"]["status"] == "dispatched"
    assert execution["lost_messages"] == []
    release.set()
    assert (await stack.client.wait("h-parked", timeout=30)).status == "completed"


async def test_a_result_its_own_worker_sent_and_the_decider_parked_fails_its_attempt(
    stack: Stack,
) -> None:
    """What the parked reports are for, under a user per role: RabbitMQ keeps the parked
    result's user_id, and the worker that sent it may answer the task."""
    await _dispatched(stack, "h-own")
    route = stack.topology.results_route("h-own")
    unreadable = TaskResult(execution_id="h-own", token=deliveries[0]).model_dump(mode="json")
    unreadable["error"] = "not an error object"  # the decider parks what it cannot decode
    worker = stack.as_user("worker").amqp_url
    user = aio_pika.connection.make_url(worker).user
    body = json.dumps(unreadable).encode()
    await _publish(worker, stack.topology.results, route.routing_key, body, user_id=user)
    history = await eventually(
        lambda: stack.client.history("h-own"),
        lambda events: any(e["type"] == "StepAttemptFailed" for e in events),
        timeout=30,
        what="the attempt failed",
    )
    (failed,) = [e for e in history if e["type"] == "StepAttemptFailed"]
    assert failed["data"]["error"]["code"] == "MESSAGE_PARKED"
    release.set()
    assert (await stack.client.wait("h-own", timeout=30)).status == "completed"


async def test_timers_from_a_worker_user_fire_nothing_and_are_counted(stack: Stack) -> None:
    await stack.client.start("waiting", None, execution_id="w-1")
    await eventually(  # until the await waits, with its timer set
        lambda: as_sent(stack.client.get("w-1")),
        lambda execution: execution["steps"]["approval"]["status"] == "scheduled",
        timeout=30,
        what="the await waiting",
    )
    route = stack.topology.results_route("w-1")
    far = int(time.time() * 1000) + 10 * 3600 * 1000
    before = _refused("wrong_role", "TimerDue")
    for key in ("timer:approval", "workflow"):
        await _as_worker(
            stack, route.routing_key, TimerDue(execution_id="w-1", key=key, due_at=far)
        )
    await _until(lambda: _refused("wrong_role", "TimerDue") == before + 2)
    execution = view_json(await stack.client.get("w-1"))
    assert execution["status"] == "running"
    assert execution["steps"]["approval"]["status"] == "scheduled"
    await stack.client.signal("w-1", "go", {"ok": True})
    assert (await stack.client.wait("w-1", timeout=30)).status == "completed"


async def test_a_delivery_lost_from_a_worker_user_dispatches_nothing_again(stack: Stack) -> None:
    await _dispatched(stack, "h-lost")
    route = stack.topology.results_route("h-lost")
    before = _refused("wrong_role", "DeliveryLost")
    lost = DeliveryLost(execution_id="h-lost", token=deliveries[0], reason="forged")
    await _as_worker(stack, route.routing_key, lost)
    # Refused as it arrived: never decided on. A second dispatch would show as a second
    # delivery, which the held task's worker records, before or after the release.
    await _until(lambda: _refused("wrong_role", "DeliveryLost") == before + 1)
    assert len(deliveries) == 1
    release.set()
    assert (await stack.client.wait("h-lost", timeout=30)).status == "completed"
    assert len(deliveries) == 1


async def test_a_worker_user_claiming_orbit_s_runtime_may_not_serve_built_in_tasks(
    stack: Stack,
) -> None:
    from orbit_sdk.amqp import open_channel  # noqa: PLC0415
    from orbit_sdk.rpc import Requester  # noqa: PLC0415

    before = _refused("reserved_task", "RegisterWorker", consumer="dispatcher")
    claim = RegisterWorker(
        worker_id="impostor",
        runtime="orbit",
        contracts=(ContractAnnouncement(task="orbit.http.request", version="1"),),
    )
    connection = await aio_pika.connect_robust(stack.as_user("worker").amqp_url)
    try:
        requester = Requester(await open_channel(connection))
        await requester.start()
        answer = await requester.request(
            stack.topology.control, "control", encode(claim), timeout=10
        )
    finally:
        await connection.close()
    assert b'"RESERVED_TASK"' in answer
    assert _refused("reserved_task", "RegisterWorker", consumer="dispatcher") == before + 1
