"""The dispatcher and the worker SDK against a real RabbitMQ and Postgres.

The test plays the decider: it declares task queues and publishes
``TaskAssignment`` messages to them, and reads what reaches the decider's
partition queues.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aio_pika
import asyncpg
import pytest
from aio_pika.abc import AbstractChannel, AbstractRobustConnection
from pydantic import BaseModel, JsonValue

from orbit_model import compile_definition
from orbit_model.decider import decide_until_stable
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.events import StepAttemptUncertain, StepSucceeded
from orbit_model.inputs import start_execution
from orbit_model.messages import (
    CommandReply,
    ContractAnnouncement,
    ControlError,
    ControlReply,
    DeliveryLost,
    Heartbeat,
    HeartbeatReply,
    InflightTask,
    RegisterWorker,
    Registration,
    StartExecution,
    TaskAssignment,
    TaskResult,
    Unregistered,
    UnregisterWorker,
    decode_command,
    decode_control_reply,
    decode_decider_input,
    encode,
)
from orbit_model.state import ExecutionState, evolve, replay
from orbit_model.topology import Topology
from orbit_sdk import TaskContext, TaskError, Worker, task
from orbit_sdk.amqp_client import AmqpClient
from orbit_sdk.rpc import Requester
from orbit_services.dispatcher.service import DispatcherService
from orbit_services.runtime.broker import declare_task_queue, declare_topology
from orbit_services.store import Append, EventStore
from tests.database import Database
from tests.rabbitmq_queues import queue_counts

from .conftest import OrbitEnv
from .eventually import eventually

EXAMPLES = Path(__file__).parents[2] / "examples"
T = TypeVar("T")


# -- tasks the workers serve ---------------------------------------------------


class ChargeIn(BaseModel):
    order: str
    currency: str = "EUR"


class ChargeOut(BaseModel):
    amount: int
    currency: str


seen: dict[str, TaskContext] = {}


@task("charge-card", version="2")
async def charge_card(inp: ChargeIn, ctx: TaskContext) -> ChargeOut:
    seen[ctx.token] = ctx
    if inp.order == "declined":
        raise TaskError("CARD_DECLINED", "the card was declined", retryable=False, details={"x": 1})
    if inp.order == "broken":
        raise ValueError("no such card")
    return ChargeOut(amount=4200, currency=inp.currency)


@task("echo", version="1")
async def echo(inp: dict[str, Any]) -> dict[str, Any]:
    return {"echo": inp}


@dataclass
class Gate:
    """Holds tasks until opened; counts how many run at once."""

    opened: asyncio.Event = field(default_factory=asyncio.Event)
    running: int = 0
    most: int = 0
    started: list[str] = field(default_factory=list)

    async def hold(self, ctx: TaskContext) -> None:
        self.running += 1
        self.most = max(self.most, self.running)
        self.started.append(ctx.token)
        try:
            await self.opened.wait()
        finally:
            self.running -= 1


# -- the harness ---------------------------------------------------------------


@dataclass
class Harness:
    env: OrbitEnv
    connection: AbstractRobustConnection
    channel: AbstractChannel
    requester: Requester
    store: EventStore
    inbox: list[Any]
    """Everything that reached the decider's partition queues."""
    dispatcher: DispatcherService

    @property
    def database(self) -> Database:
        return Database(self.env.settings.database_url)

    @property
    def topology(self) -> Topology:
        return self.env.topology

    async def control(self, request: RegisterWorker | Heartbeat | UnregisterWorker) -> ControlReply:
        body = await self.requester.request(self.topology.control, "control", encode(request), 5)
        return decode_control_reply(body)

    async def register(self, *contracts: tuple[str, str], worker_id: str = "w-1") -> Registration:
        reply = await self.control(
            RegisterWorker(
                worker_id=worker_id,
                contracts=tuple(ContractAnnouncement(task=t, version=v) for t, v in contracts),
            )
        )
        assert isinstance(reply, Registration), reply
        return reply

    async def publish(
        self, exchange: str, routing_key: str, body: bytes, headers: dict[str, Any] | None = None
    ) -> None:
        target = await self.channel.get_exchange(exchange)
        await target.publish(aio_pika.Message(body, headers=headers), routing_key)

    async def live_execution(self) -> tuple[str, str, ExecutionState]:
        """A hello-world execution in the store, its one step dispatched: its id, the
        token the dispatcher takes as live, and its state."""
        hello = compile_definition((EXAMPLES / "hello-world.yaml").read_text())
        await self.store.register_definition(hello)
        execution_id = f"e-{uuid.uuid4().hex[:8]}"
        created = start_execution(hello.ir, hello.hash, execution_id, {"name": "x"})
        state, decided = decide_until_stable(replay([created]), hello.ir, 0)
        await self.store.append([Append(execution_id, 0, [created, *decided], state)])
        (token,) = [u.token for u in state.units.values() if u.token]
        return execution_id, token, state

    async def dispatch(
        self,
        task: str,
        version: str,
        input: JsonValue,
        execution_id: str | None = None,
        token: str | None = None,
    ) -> TaskAssignment:
        """What the decider does: the contract's queue declared, the task published to it."""
        execution_id = execution_id or f"e-{uuid.uuid4().hex[:8]}"
        await declare_task_queue(self.channel, self.topology, task, version)
        message = TaskAssignment(
            execution_id=execution_id,
            workflow="wf",
            unit="step",
            task=task,
            task_version=version,
            token=token or uuid.uuid4().hex,
            attempt=1,
            idempotency_key=f"{execution_id}:step",
            input=input,
            result_route=self.topology.decider_route(execution_id),
        )
        route = self.topology.task_route(task, version)
        await self.publish(route.exchange, route.routing_key, encode(message))
        return message

    async def decider_inputs(self, count: int, timeout: float = 10.0) -> list[Any]:
        """Wait until ``count`` messages reached the decider's partitions; all of them."""

        async def probe() -> int:
            return len(self.inbox)

        await eventually(probe, lambda n: n >= count, timeout, what=f"{count} decider inputs")
        return list(self.inbox)

    async def result_for(self, dispatch: TaskAssignment) -> TaskResult:
        [result] = await self.decider_inputs(1)
        assert isinstance(result, TaskResult)
        assert (result.execution_id, result.token) == (dispatch.execution_id, dispatch.token)
        return result

    async def ready_messages(self, queue: str) -> int:
        """Messages ready in ``queue``; -1 if it does not exist."""
        # A channel of its own: a passive declare of a missing queue closes it.
        async with self.connection.channel() as channel:
            try:
                declared = await channel.declare_queue(queue, passive=True, robust=False)
            except aio_pika.exceptions.ChannelNotFoundEntity:
                return -1
        count = declared.declaration_result.message_count
        assert count is not None
        return count

    async def session_row(self, session_id: str) -> asyncpg.Record | None:
        return await self.database.fetchrow(
            "SELECT * FROM worker_sessions WHERE session_id = $1", session_id
        )

    def worker(self, *tasks: Any, **options: Any) -> Worker:
        return Worker(list(tasks), settings=self.env.settings, **options)


@pytest.fixture
async def harness(orbit_env: OrbitEnv) -> AsyncIterator[Harness]:
    settings = orbit_env.settings_with(heartbeat_interval_ms=100)
    env = OrbitEnv(settings, orbit_env.topology)
    dispatcher = DispatcherService(settings)
    await dispatcher.start()
    store = await EventStore.connect(settings.database_url)
    connection = await aio_pika.connect_robust(settings.amqp_url)
    channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
    requester = Requester(await connection.channel(publisher_confirms=True))
    await requester.start()
    inbox: list[Any] = []

    async def receive(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        inbox.append(decode_decider_input(message.body))

    # Consumed, not polled: quorum queues with a single active consumer refuse basic.get.
    for partition in range(orbit_env.topology.partitions):
        queue = await channel.get_queue(orbit_env.topology.decider_queue(partition))
        await queue.consume(receive, no_ack=True)
    try:
        yield Harness(env, connection, channel, requester, store, inbox, dispatcher)
    finally:
        await connection.close()
        await store.close()
        await dispatcher.stop()


@pytest.fixture
async def running() -> AsyncIterator[list[Worker]]:
    """Workers a test starts; stopped at its end."""
    workers: list[Worker] = []
    yield workers
    await asyncio.gather(*(worker.stop() for worker in workers))


async def start(workers: list[Worker], worker: Worker) -> Worker:
    await worker.start()
    workers.append(worker)
    return worker


# -- registration and sessions -------------------------------------------------


async def test_register_opens_a_session_and_declares_the_task_queues(harness: Harness) -> None:
    registration = await harness.register(("charge-card", "2"), ("echo", "1"))
    topology = harness.topology
    assert registration.task_queues == {
        "charge-card@2": topology.task_queue("charge-card", "2"),
        "echo@1": topology.task_queue("echo", "1"),
    }
    assert registration.heartbeat_interval_ms == 100
    # No workflow is registered here, so none calls either task.
    assert [warning.split("'")[1] for warning in registration.warnings] == ["charge-card", "echo"]
    row = await harness.session_row(registration.session_id)
    assert row is not None
    assert row["worker_id"] == "w-1"
    assert row["closed_at"] is None
    assert [(c["task"], c["version"]) for c in json.loads(row["contracts"])] == [
        ("charge-card", "2"),
        ("echo", "1"),
    ]
    for queue in registration.task_queues.values():
        assert await harness.ready_messages(queue) == 0  # exists, empty


async def test_a_contract_no_workflow_calls_gets_a_warning(harness: Harness) -> None:
    await harness.store.register_definition(
        compile_definition((EXAMPLES / "hello-world.yaml").read_text())
    )
    used = await harness.register(("greet", "1"))
    assert used.warnings == ()
    unused = await harness.register(("greet", "7"), ("never-called", "1"))
    [other_version, uncalled] = unused.warnings
    assert "'greet'" in other_version
    assert "version 7" in other_version
    assert "at 1" in other_version
    assert uncalled.startswith("'never-called' (version 1) is called by no registered workflow")


@pytest.mark.parametrize(
    ("worker_id", "contracts", "code"),
    [
        ("w-1", (), ErrorCode.INVALID_REQUEST),
        ("  ", (("echo", "1"),), ErrorCode.INVALID_REQUEST),
        ("w-1", (("workflow:send-invoice", "1"),), ErrorCode.RESERVED_TASK),
        ("w-1", (("orbit.http.request", "1"),), ErrorCode.RESERVED_TASK),
        ("w-1", (("bad name", "1"),), ErrorCode.INVALID_REQUEST),
    ],
)
async def test_registrations_orbit_cannot_serve_are_refused(
    harness: Harness, worker_id: str, contracts: tuple[tuple[str, str], ...], code: ErrorCode
) -> None:
    reply = await harness.control(
        RegisterWorker(
            worker_id=worker_id,
            contracts=tuple(ContractAnnouncement(task=t, version=v) for t, v in contracts),
        )
    )
    assert isinstance(reply, ControlError)
    assert reply.error.code == code
    assert await harness.database.fetchval("SELECT count(*) FROM worker_sessions") == 0


async def test_orbit_s_own_runtime_registers_the_built_in_http_task(harness: Harness) -> None:
    reply = await harness.control(
        RegisterWorker(
            worker_id="orbit-http-adapter-test",
            runtime="orbit",
            contracts=(ContractAnnouncement(task="orbit.http.request", version="1"),),
        )
    )
    assert isinstance(reply, Registration), reply
    queue = harness.topology.task_queue("orbit.http.request", "1")
    assert reply.task_queues == {"orbit.http.request@1": queue}
    assert await harness.ready_messages(queue) == 0


async def test_unknown_sessions_are_refused(harness: Harness) -> None:
    for request in (Heartbeat(session_id="nope"), UnregisterWorker(session_id="nope")):
        reply = await harness.control(request)
        assert isinstance(reply, ControlError)
        assert reply.error.code == ErrorCode.UNKNOWN_SESSION
        assert "register again" in reply.error.message


async def test_a_malformed_control_request_is_answered_with_an_error(harness: Harness) -> None:
    body = await harness.requester.request(harness.topology.control, "control", b"{}", 5)
    reply = decode_control_reply(body)
    assert isinstance(reply, ControlError)
    assert reply.error.code == ErrorCode.INVALID_REQUEST


async def test_unregister_reports_the_tasks_in_flight_as_lost(harness: Harness) -> None:
    registration = await harness.register(("echo", "1"))
    held = (
        InflightTask(execution_id="e-1", token="t-1"),
        InflightTask(execution_id="e-2", token="t-2"),
    )
    await harness.control(Heartbeat(session_id=registration.session_id, inflight=held))
    row = await harness.session_row(registration.session_id)
    assert row is not None
    assert len(json.loads(row["inflight"])) == 2

    reply = await harness.control(UnregisterWorker(session_id=registration.session_id))
    assert reply == Unregistered(lost=2)
    lost = await harness.decider_inputs(2)
    assert sorted((m.execution_id, m.token) for m in lost) == [("e-1", "t-1"), ("e-2", "t-2")]
    assert all(isinstance(m, DeliveryLost) and m.reason == "worker unregistered" for m in lost)
    row = await harness.session_row(registration.session_id)
    assert row is not None
    assert row["closed_at"] is not None
    again = await harness.control(Heartbeat(session_id=registration.session_id))
    assert isinstance(again, ControlError)
    assert again.error.code == ErrorCode.UNKNOWN_SESSION


# -- dispatching ---------------------------------------------------------------


async def test_a_dispatched_task_waits_in_its_queue_until_a_worker_comes(
    harness: Harness, running: list[Worker]
) -> None:
    dispatch = await harness.dispatch("echo", "1", {"a": 1})
    queue = harness.topology.task_queue("echo", "1")
    await eventually(lambda: harness.ready_messages(queue), lambda n: n == 1, what="queued task")
    await start(running, harness.worker(echo, worker_id="late"))
    result = await harness.result_for(dispatch)
    assert result.output == {"echo": {"a": 1}}
    assert result.error is None
    assert result.worker_id == "late"


# -- the worker ----------------------------------------------------------------


async def test_a_task_result_carries_the_output(harness: Harness, running: list[Worker]) -> None:
    worker = await start(running, harness.worker(charge_card, worker_id="billing-1"))
    assert worker.session_id is not None
    dispatch = await harness.dispatch("charge-card", "2", {"order": "o-1", "currency": "USD"})
    result = await harness.result_for(dispatch)
    assert result.output == {"amount": 4200, "currency": "USD"}
    assert result.error is None
    assert result.worker_id == "billing-1"
    ctx = seen[dispatch.token]
    assert (ctx.execution_id, ctx.idempotency_key, ctx.attempt, ctx.redelivery) == (
        dispatch.execution_id,
        dispatch.idempotency_key,
        1,
        False,
    )
    assert (ctx.unit, ctx.workflow) == ("step", "wf")


@pytest.mark.parametrize(
    ("input", "expected"),
    [
        ({"order": "declined"}, ("CARD_DECLINED", False, "the card was declined", {"x": 1})),
        (
            {"order": "broken"},
            ("TASK_FAILED", True, "ValueError: no such card", {"type": "ValueError"}),
        ),
        ({"currency": "EUR"}, ("INVALID_INPUT", False, "order: Field required", None)),
    ],
)
async def test_a_failing_task_reports_its_error(
    harness: Harness, running: list[Worker], input: JsonValue, expected: tuple[Any, ...]
) -> None:
    code, retryable, message, details = expected
    await start(running, harness.worker(charge_card))
    result = await harness.result_for(await harness.dispatch("charge-card", "2", input))
    assert result.output is None
    assert result.error is not None
    assert (result.error.code, result.error.retryable, result.error.details) == (
        code,
        retryable,
        details,
    )
    assert message in result.error.message


async def test_concurrency_bounds_the_tasks_running_at_once(
    harness: Harness, running: list[Worker]
) -> None:
    gate = Gate()

    @task("held", version="1")
    async def held(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
        await gate.hold(ctx)
        return inp

    await start(running, harness.worker(held, concurrency=2))
    dispatches = [await harness.dispatch("held", "1", {"n": n}) for n in range(5)]
    await eventually(lambda: _value(gate.running), lambda n: n == 2, what="two running")
    # The broker holds back the rest: they wait in the queue, for any worker.
    queue = harness.topology.task_queue("held", "1")
    await eventually(lambda: harness.ready_messages(queue), lambda n: n == 3, what="3 queued")
    gate.opened.set()
    results = await harness.decider_inputs(5)
    assert sorted(r.token for r in results) == sorted(d.token for d in dispatches)
    assert gate.most == 2


async def test_a_worker_stopped_mid_task_gives_it_back(
    harness: Harness, running: list[Worker]
) -> None:
    gate = Gate()

    @task("slow", version="1")
    async def stuck(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
        await gate.hold(ctx)
        return {"by": "first"}

    redeliveries: list[bool] = []

    @task("slow", version="1")
    async def quick(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
        redeliveries.append(ctx.redelivery)
        return {"by": "second"}

    first = await start(running, harness.worker(stuck, worker_id="first", stop_timeout=0.2))
    # A live execution: the second worker asks before running the redelivery.
    execution_id, token, _ = await harness.live_execution()
    dispatch = await harness.dispatch("slow", "1", {}, execution_id, token)
    await eventually(lambda: _value(gate.running), lambda n: n == 1, what="the task running")
    await first.stop()
    assert gate.running == 0  # cancelled, not left running

    await start(running, harness.worker(quick, worker_id="second"))
    result = await harness.result_for(dispatch)
    assert (result.output, result.worker_id) == ({"by": "second"}, "second")
    assert redeliveries == [True]
    # Given back to the queue, so not reported lost too (it would run twice).
    assert [type(m).__name__ for m in harness.inbox] == ["TaskResult"]


async def test_a_copy_of_a_task_the_worker_holds_is_settled_with_it_not_run(
    harness: Harness, running: list[Worker]
) -> None:
    gate = Gate()

    @task("slow", version="1")
    async def held(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
        await gate.hold(ctx)
        return {}

    await start(running, harness.worker(held, worker_id="w", concurrency=4))
    # The same assignment twice in the queue (an outbox row published twice).
    execution_id, token, _ = await harness.live_execution()
    await harness.dispatch("slow", "1", {}, execution_id, token)
    await harness.dispatch("slow", "1", {}, execution_id, token)
    queue = harness.topology.task_queue("slow", "1")
    await eventually(lambda: _value(gate.running), lambda n: n == 1, what="the task running")
    await eventually(lambda: harness.ready_messages(queue), lambda n: n == 0, what="both taken")
    # Whenever the copy is handled, it does not run: not now, nor once the run ends
    # (the worker's stop below waits for its handlers; gate.started is checked again).
    assert gate.started == [token]
    gate.opened.set()
    [result] = await harness.decider_inputs(1)
    assert isinstance(result, TaskResult)
    assert result.token == token
    await running.pop().stop()
    # Both deliveries were acked with the run: nothing goes back to the queue.
    assert await harness.ready_messages(queue) == 0
    assert gate.started == [token]


async def test_a_redelivery_the_engine_dispatched_again_since_is_not_run(
    harness: Harness, running: list[Worker]
) -> None:
    gate = Gate()
    runs: list[str] = []

    @task("slow", version="1")
    async def stuck(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
        await gate.hold(ctx)
        return {}

    @task("slow", version="1")
    async def counted(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
        runs.append(ctx.token)
        return {}

    first = await start(running, harness.worker(stuck, worker_id="first", stop_timeout=0.2))
    execution_id, token, state = await harness.live_execution()
    await harness.dispatch("slow", "1", {}, execution_id, token)
    await eventually(lambda: _value(gate.running), lambda n: n == 1, what="the task running")
    # Meanwhile the engine took the delivery for lost and moved on to a new one.
    lost = StepAttemptUncertain(unit="greet", token=token, reason="worker lost")
    await harness.store.append([Append(execution_id, state.last_seq, [lost], evolve(state, lost))])
    await first.stop()

    await start(running, harness.worker(counted, worker_id="second"))
    queue = harness.topology.task_queue("slow", "1")
    # Taken and acked, not given back: a run would have been recorded before its ack.
    await eventually(
        lambda: asyncio.to_thread(queue_counts, queue),
        lambda counts: counts == (0, 0),
        timeout=30,
        interval=0.2,
        what="the redelivery settled",
    )
    assert runs == []
    assert harness.inbox == []


async def test_the_engine_can_cancel_a_running_task(
    harness: Harness, running: list[Worker]
) -> None:
    @task("patient", version="1")
    async def patient(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
        await ctx.heartbeat()
        await ctx.cancelled.wait()
        raise TaskError("CANCELLED", "stopped", retryable=False)

    await start(running, harness.worker(patient))
    # No execution holds this token in the store: the dispatcher says stop.
    result = await harness.result_for(await harness.dispatch("patient", "1", {}))
    assert result.error is not None
    assert result.error.code == "CANCELLED"


async def test_a_malformed_assignment_is_dead_lettered(
    harness: Harness, running: list[Worker]
) -> None:
    await start(running, harness.worker(echo))
    await harness.publish(harness.topology.tasks, "echo@1", b"garbage")
    dead = await harness.channel.get_queue(harness.topology.dead_letter)

    async def probe() -> aio_pika.abc.AbstractIncomingMessage | None:
        return await dead.get(fail=False, no_ack=True)

    parked = await eventually(probe, lambda m: m is not None, what="a parked assignment")
    assert parked is not None
    assert parked.body == b"garbage"


async def test_a_worker_without_a_dispatcher_fails_to_start_readably(
    orbit_env: OrbitEnv,
) -> None:
    worker = Worker([echo], settings=orbit_env.settings, register_timeout=0.3)
    with pytest.raises(OrbitError, match="does not exist") as missing:
        await worker.start()
    assert missing.value.code == ErrorCode.UNAVAILABLE

    connection = await aio_pika.connect(orbit_env.settings.amqp_url)
    try:
        await declare_topology(await connection.channel(), orbit_env.topology)
    finally:
        await connection.close()
    with pytest.raises(OrbitError, match="is the dispatcher running") as silent:
        await worker.start()
    assert silent.value.code == ErrorCode.UNAVAILABLE


async def test_a_worker_takes_its_amqp_heartbeat_from_the_services_session_timeout(
    orbit_env: OrbitEnv,
) -> None:
    # The services expire a silent session after 4 s; the worker's own setting says 30 s.
    services = orbit_env.settings_with(session_timeout_ms=4_000, heartbeat_interval_ms=100)
    dispatcher = DispatcherService(services)
    await dispatcher.start()
    worker = Worker([echo], settings=orbit_env.settings)
    assert worker.settings.session_timeout_ms == 30_000
    try:
        await worker.start()
        assert worker._serving is not None
        connection: Any = worker._serving._connection
        assert connection.transport.connection.heartbeat_timeout == 2  # half the services' 4 s
        assert worker.session_id is not None
        assert worker._serving.session is not None
        assert await worker._serving.session.heartbeat([]) == ()  # the session lives on
    finally:
        await worker.stop()
        await dispatcher.stop()


async def test_run_serves_until_stop_and_unregisters(harness: Harness) -> None:
    worker = harness.worker(echo)
    serving = asyncio.create_task(worker.run())
    await eventually(lambda: _value(worker.session_id is not None), what="registered")
    session_id = worker.session_id
    assert session_id is not None
    result = await harness.result_for(await harness.dispatch("echo", "1", {"n": 1}))
    assert result.output == {"echo": {"n": 1}}
    await worker.stop()
    await serving
    row = await harness.session_row(session_id)
    assert row is not None
    assert row["closed_at"] is not None


async def test_a_worker_whose_session_expired_registers_again(
    harness: Harness, running: list[Worker]
) -> None:
    worker = await start(running, harness.worker(echo))
    first = worker.session_id
    # As the liveness service does when it finds a session silent for too long.
    await harness.database.execute(
        "UPDATE worker_sessions SET closed_at = now() WHERE session_id = $1", first
    )
    await eventually(lambda: _value(worker.session_id != first), what="a new session")
    result = await harness.result_for(await harness.dispatch("echo", "1", {}))
    assert result.error is None


async def test_a_refused_registration_fails_the_start(harness: Harness) -> None:
    @task("orbit.mine", version="1")
    async def mine(inp: dict[str, Any]) -> None:
        return None

    with pytest.raises(OrbitError) as refused:
        await harness.worker(mine).start()
    assert refused.value.code == ErrorCode.RESERVED_TASK


# -- AMQP commands -------------------------------------------------------------


async def test_publish_start_waits_for_the_reply(harness: Harness) -> None:
    # The test answers for the gateway.
    commands = await harness.channel.get_queue(harness.topology.commands)
    received: list[str | None] = []

    async def answer(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        command = decode_command(message.body)
        assert isinstance(command, StartExecution)
        received.append(command.execution_id)
        reply = CommandReply(
            ok=True, result={"execution_id": command.execution_id, "created": True}
        )
        if message.reply_to:
            # Not mandatory: RabbitMQ returns mandatory replies to direct reply-to
            # as unroutable even when it delivers them.
            await harness.channel.default_exchange.publish(
                aio_pika.Message(encode(reply), correlation_id=message.correlation_id),
                message.reply_to,
                mandatory=False,
            )
        await message.ack()

    await commands.consume(answer)
    async with AmqpClient(harness.env.settings) as client:
        reply = await client.publish_start("hello-world", {"name": "ada"}, execution_id="x-1")
        assert reply is None
        reply = await client.publish_start(
            "hello-world", {"name": "ada"}, execution_id="x-2", wait_reply=True
        )
    assert reply == CommandReply(ok=True, result={"execution_id": "x-2", "created": True})
    assert received == ["x-1", "x-2"]


async def test_a_dispatcher_without_a_broker_fails_to_start_readably(orbit_env: OrbitEnv) -> None:
    settings = orbit_env.settings_with(amqp_url="amqp://guest:guest@127.0.0.1:1/")
    dispatcher = DispatcherService(settings)
    with pytest.raises(OrbitError, match="cannot connect to RabbitMQ") as refused:
        await dispatcher.start()
    assert refused.value.code == ErrorCode.UNAVAILABLE


async def _value(value: T) -> T:
    return value


async def test_heartbeats_read_only_what_was_appended_since_the_last(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    hello = compile_definition((EXAMPLES / "hello-world.yaml").read_text())
    store = harness.store
    await store.register_definition(hello)
    created = start_execution(hello.ir, hello.hash, "hb-1", {"name": "x"})
    state = replay([created])
    state, decided = decide_until_stable(state, hello.ir, 0)
    await store.append([Append("hb-1", 0, [created, *decided], state)])
    (token,) = [u.token for u in state.units.values() if u.token]
    registration = await harness.register(("greet", "1"))
    # Every state the dispatcher's cache brings up to date is read through
    # store.snapshots.read (the last snapshot newer than what it holds, and the
    # events after): what it asked for and what came back.
    reads: list[dict[str, int]] = []
    answers: list[tuple[int, int]] = []  # (snapshots, events) in each answer
    dispatchers_store = harness.dispatcher._store
    assert dispatchers_store is not None
    read = dispatchers_store.snapshots.read

    async def counted(after: Any) -> Any:
        reads.append(dict(after))
        loaded = await read(after)
        answers.append((len(loaded.snapshots), sum(map(len, loaded.events.values()))))
        return loaded

    monkeypatch.setattr(dispatchers_store.snapshots, "read", counted)
    beat = Heartbeat(
        session_id=registration.session_id,
        inflight=(InflightTask(execution_id="hb-1", token=token),),
    )
    assert await harness.control(beat) == HeartbeatReply()  # the token is live
    assert await harness.control(beat) == HeartbeatReply()
    assert reads == [{"hb-1": 0}, {"hb-1": state.last_seq}]  # the second asks nothing old
    assert answers == [(0, state.last_seq), (0, 0)]  # and is given nothing
    # The unit is resolved meanwhile: the next heartbeat reads that and says stop.
    succeeded = StepSucceeded(unit="greet", output={"greeting": "hi"}, attempt=1)
    await store.append([Append("hb-1", state.last_seq, [succeeded], evolve(state, succeeded))])
    assert await harness.control(beat) == HeartbeatReply(cancel=(token,))
    assert reads[-1] == {"hb-1": state.last_seq}
    assert answers[-1] == (0, 1)  # only the one event appended since
