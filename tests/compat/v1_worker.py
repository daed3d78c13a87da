"""A worker and a command client of protocol version 1, recorded: do not update them.

They are written from docs/protocol.md as it stood for version 1, with a
plain AMQP client (aio-pika) and nothing of Orbit's, as a third party would
write them: the edition of commit 0bac265 (per-role RabbitMQ users, every
message with ``user_id``), and, with ``user_id=False``, the first edition
(commit a159bd8), which set none. ``tests/compat`` runs them against the
engine, so that Orbit keeps reading what they send for as long as
docs/protocol.md ("Versions") says; when that window closes, the tests change
to expect ``UNSUPPORTED_VERSION``, and these files stay as they are.

What each edition's checklist (its section 9) asks of a worker, in order:
log in with ``ORBIT_AMQP_URL``; consume ``amq.rabbitmq.reply-to`` no-ack on a
channel with confirms and send control requests on it to ``NS.control`` /
``control``, mandatory, with ``reply_to`` and a ``correlation_id``; register
every contract; consume each of ``task_queues`` passively, manual acks; for
each delivery, name a possibly repeated one in a heartbeat first and skip it
if cancelled; publish the ``TaskResult`` to ``result_route`` exactly as
given, persistent, mandatory, confirmed, then ack; heartbeat every
``heartbeat_interval_ms``; to stop, cancel the consumers, heartbeat with
nothing held, unregister, close.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage

VERSION = 1
REPLY_TO = "amq.rabbitmq.reply-to"
Task = Callable[[Any], Awaitable[Any]]


class ControlFailure(Exception):
    """The dispatcher answered a request with a ControlError."""

    def __init__(self, error: dict[str, str]) -> None:
        super().__init__(f"{error['code']}: {error['message']}")
        self.code = error["code"]
        self.message = error["message"]


class _Requests:
    """Request and reply on one channel over direct reply-to (section 6.5)."""

    def __init__(self, channel: AbstractChannel, user_id: str | None) -> None:
        self.channel = channel
        self.user_id = user_id
        self.waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}

    async def start(self) -> None:
        replies = await self.channel.declare_queue(REPLY_TO, passive=True)
        await replies.consume(self._answer, no_ack=True)

    async def _answer(self, message: AbstractIncomingMessage) -> None:
        future = self.waiting.pop(message.correlation_id or "", None)
        if future is not None and not future.done():
            future.set_result(json.loads(message.body))

    async def ask(self, exchange: str, key: str, body: dict[str, Any]) -> dict[str, Any]:
        correlation_id = uuid.uuid4().hex
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[correlation_id] = future
        target = await self.channel.get_exchange(exchange, ensure=False)
        await target.publish(
            _message(
                body,
                self.user_id,
                reply_to=REPLY_TO,
                correlation_id=correlation_id,
                delivery_mode=aio_pika.DeliveryMode.NOT_PERSISTENT,
            ),
            key,
            mandatory=True,
        )
        async with asyncio.timeout(10):
            return await future


def _message(body: dict[str, Any], user_id: str | None, **properties: Any) -> aio_pika.Message:
    return aio_pika.Message(
        json.dumps(body).encode(),
        content_type="application/json",
        user_id=user_id,
        **properties,
    )


def _login(amqp_url: str) -> str:
    return aio_pika.connection.make_url(amqp_url).user or "guest"


class V1Worker:
    """Serves ``tasks`` (``task@version`` to an async function of the task's input).

    Args:
        user_id: Set ``user_id`` on every message (the version-1 docs since per-role
            users); False: the first edition, which set none.
    """

    def __init__(
        self,
        amqp_url: str,
        namespace: str,
        tasks: dict[str, Task],
        worker_id: str = "v1-worker",
        *,
        user_id: bool = True,
    ) -> None:
        self.amqp_url = amqp_url
        self.namespace = namespace
        self.tasks = tasks
        self.worker_id = worker_id
        self.user_id = _login(amqp_url) if user_id else None
        self.registration: dict[str, Any] = {}
        self.replies: list[dict[str, Any]] = []
        """Every answer the dispatcher gave, as received."""
        self.held: dict[str, str] = {}
        self._connection: aio_pika.abc.AbstractConnection | None = None
        self._requests: _Requests | None = None
        self._results: AbstractChannel | None = None
        self._consumers: list[tuple[aio_pika.abc.AbstractQueue, str]] = []
        self._beating: asyncio.Task[None] | None = None

    async def control(self, body: dict[str, Any]) -> dict[str, Any]:
        """Send one control request; its answer (a ControlError raises)."""
        assert self._requests is not None
        answer = await self._requests.ask(f"{self.namespace}.control", "control", body)
        self.replies.append(answer)
        if answer.get("type") == "ControlError":
            raise ControlFailure(answer["error"])
        return answer

    async def start(self) -> dict[str, Any]:
        self._connection = await aio_pika.connect(self.amqp_url)
        control = await self._connection.channel(publisher_confirms=True)
        self._requests = _Requests(control, self.user_id)
        await self._requests.start()
        contracts = []
        for key in self.tasks:
            task, _, version = key.rpartition("@")
            contracts.append({"task": task, "version": version})
        self.registration = await self.control(
            {
                "v": VERSION,
                "type": "RegisterWorker",
                "worker_id": self.worker_id,
                "runtime": "node",
                "sdk": "recorded-v1",
                "contracts": contracts,
            }
        )
        self._results = await self._connection.channel(publisher_confirms=True)
        tasks = await self._connection.channel()
        await tasks.set_qos(prefetch_count=4)
        for key in self.tasks:
            queue = await tasks.declare_queue(self.registration["task_queues"][key], passive=True)
            self._consumers.append((queue, await queue.consume(self._on_task)))
        self._beating = asyncio.create_task(self._beat())
        return self.registration

    async def _heartbeat(self) -> list[str]:
        inflight = [{"execution_id": e, "token": t} for t, e in self.held.items()]
        body = {
            "v": VERSION,
            "type": "Heartbeat",
            "session_id": self.registration["session_id"],
            "inflight": inflight,
        }
        return list((await self.control(body)).get("cancel", []))

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.registration["heartbeat_interval_ms"] / 1000)
            with contextlib.suppress(Exception):
                await self._heartbeat()

    async def _on_task(self, message: AbstractIncomingMessage) -> None:
        try:
            assignment = json.loads(message.body)
            assert assignment.get("v", 1) == VERSION
            task = self.tasks[f"{assignment['task']}@{assignment['task_version']}"]
        except (ValueError, KeyError, AssertionError):
            await message.reject(requeue=False)
            return
        token = assignment["token"]
        self.held[token] = assignment["execution_id"]
        try:
            if (assignment.get("redelivery") or message.redelivered) and (
                token in await self._heartbeat()
            ):
                await message.ack()
                return
            result: dict[str, Any] = {
                "v": VERSION,
                "type": "TaskResult",
                "execution_id": assignment["execution_id"],
                "token": token,
                "worker_id": self.worker_id,
            }
            try:
                result["output"] = await task(assignment.get("input"))
            except Exception as error:
                result["error"] = {"code": "TASK_FAILED", "message": str(error)}
            route = assignment["result_route"]
            assert self._results is not None
            exchange = await self._results.get_exchange(route["exchange"], ensure=False)
            await exchange.publish(
                _message(result, self.user_id, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                route["routing_key"],
                mandatory=True,
            )
            await message.ack()
        finally:
            self.held.pop(token, None)

    async def stop(self) -> None:
        for queue, tag in self._consumers:
            with contextlib.suppress(Exception):
                await queue.cancel(tag)
        if self._beating is not None:
            self._beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beating
        if self.registration:
            session = self.registration["session_id"]
            with contextlib.suppress(Exception):
                await self._heartbeat()
                await self.control(
                    {"v": VERSION, "type": "UnregisterWorker", "session_id": session}
                )
        if self._connection is not None:
            await self._connection.close()


async def v1_command(
    amqp_url: str, namespace: str, body: dict[str, Any], *, user_id: bool = True
) -> dict[str, Any]:
    """Publish one command (section 6.1 and 10) and return the gateway's CommandReply."""
    connection = await aio_pika.connect(amqp_url)
    try:
        channel = await connection.channel(publisher_confirms=True)
        requests = _Requests(channel, _login(amqp_url) if user_id else None)
        await requests.start()
        return await requests.ask(f"{namespace}.commands", "command", body)
    finally:
        await connection.close()
