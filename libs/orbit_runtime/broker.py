"""RabbitMQ: every exchange and queue Orbit uses, declared in one place, and a publisher.

All names start with the namespace (``orbit`` by default), so several
installations, or tests, share one broker. Queues are durable quorum queues
with a delivery limit and a dead-letter exchange: a message that keeps
failing is parked in ``NS.dead-letter``, never looped. Messages are
persistent and published with confirms on a channel that raises on returns,
so an unroutable message is an error, not a silent loss.

The decider's input is split over ``decider_partitions`` queues, each with a
single active consumer; a message goes to the partition of its execution id,
so one execution is decided by one consumer at a time.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aio_pika
import aiormq
from aio_pika.abc import (
    AbstractChannel,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustConnection,
)
from pamqp.commands import Basic
from yarl import URL

from orbit_model.messages import Route
from orbit_runtime import metrics
from orbit_runtime.errors import translate_connect_error

log = logging.getLogger("orbit.broker")

_PERSISTENT = aio_pika.DeliveryMode.PERSISTENT
_TRANSIENT = aio_pika.DeliveryMode.NOT_PERSISTENT

DELIVERY_LIMIT = 20
"""Deliveries of one message before it is dead-lettered. Generous, because giving
a message back on a graceful stop counts as a delivery too; a message that fails
on its own merits is parked by the consumer well before (see :func:`give_back`)."""

PARK_AFTER = 5
"""Deliveries after which a consumer parks a message whose handling keeps failing."""


@dataclass(frozen=True)
class Topology:
    """The names of every exchange and queue of one installation."""

    namespace: str
    partitions: int

    @property
    def commands(self) -> str:
        return f"{self.namespace}.commands"

    @property
    def decider(self) -> str:
        return f"{self.namespace}.decider"

    def decider_queue(self, partition: int) -> str:
        return f"{self.namespace}.decider.{partition}"

    def partition_of(self, execution_id: str) -> int:
        # crc32, not hash(): it must agree across processes and languages.
        return zlib.crc32(execution_id.encode()) % self.partitions

    def decider_route(self, execution_id: str) -> Route:
        """Where anything concerning ``execution_id`` is sent for the decider."""
        return Route(exchange=self.decider, routing_key=str(self.partition_of(execution_id)))

    @property
    def control(self) -> str:
        return f"{self.namespace}.control"

    @property
    def tasks(self) -> str:
        """The exchange of task queues; the routing key is ``task@version``."""
        return f"{self.namespace}.tasks"

    def task_queue(self, task: str, version: str) -> str:
        return f"{self.namespace}.task.{task}@{version}"

    def task_route(self, task: str, version: str) -> Route:
        """Where a task of the contract ``task@version`` is published for its workers."""
        return Route(exchange=self.tasks, routing_key=task_key(task, version))

    @property
    def dead_letter(self) -> str:
        return f"{self.namespace}.dead-letter"

    def queue_arguments(self, single_active_consumer: bool = False) -> dict[str, Any]:
        arguments: dict[str, Any] = {
            "x-queue-type": "quorum",
            "x-delivery-limit": DELIVERY_LIMIT,
            "x-dead-letter-exchange": self.dead_letter,
        }
        if single_active_consumer:
            arguments["x-single-active-consumer"] = True
        return arguments


async def connect(url: str, heartbeat_seconds: int | None = None) -> AbstractRobustConnection:
    """A connection that reconnects by itself; a readable error if the broker is not there.

    ``heartbeat_seconds`` asks for AMQP heartbeats that often (unless the URL
    sets its own): a process that freezes then loses its connection, and the
    broker hands its unacked messages to others, within about twice that.
    """
    target = URL(url)
    if heartbeat_seconds is not None and "heartbeat" not in target.query:
        target = target.update_query(heartbeat=str(heartbeat_seconds))
    try:
        connection = await aio_pika.connect_robust(
            target, client_properties={"connection_name": "orbit"}
        )
    except (OSError, aio_pika.exceptions.AMQPError) as error:
        raise translate_connect_error("RabbitMQ", url, error) from error
    connection.close_callbacks.add(_on_connection_closed)
    connection.reconnect_callbacks.add(_on_reconnected)
    return connection


def _on_connection_closed(connection: Any, error: BaseException | None = None) -> None:
    # Called on our own close() too: only a close nobody asked for is a loss.
    if not getattr(connection, "_close_called", False) and not connection.is_closed:
        metrics.AMQP_CONNECTION_LOSSES.inc()


def _on_reconnected(_connection: Any) -> None:
    metrics.AMQP_RECONNECTS.inc()


async def open_channel(
    connection: AbstractRobustConnection, prefetch: int | None = None
) -> AbstractChannel:
    channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
    if prefetch is not None:
        await channel.set_qos(prefetch_count=prefetch)
    return channel


async def declare_queue(
    channel: AbstractChannel,
    topology: Topology,
    name: str,
    exchange: str,
    routing_key: str,
    *,
    single_active_consumer: bool = False,
) -> AbstractQueue:
    queue = await channel.declare_queue(
        name, durable=True, arguments=topology.queue_arguments(single_active_consumer)
    )
    await queue.bind(exchange, routing_key)
    return queue


async def declare_topology(channel: AbstractChannel, topology: Topology) -> None:
    """Declare every exchange and every fixed queue (task queues come with their workers)."""
    dead_letter = await channel.declare_exchange(
        topology.dead_letter, aio_pika.ExchangeType.FANOUT, durable=True
    )
    parked = await channel.declare_queue(
        topology.dead_letter, durable=True, arguments={"x-queue-type": "quorum"}
    )
    await parked.bind(dead_letter)
    for name in (topology.commands, topology.decider, topology.control):
        await channel.declare_exchange(name, aio_pika.ExchangeType.DIRECT, durable=True)
    await channel.declare_exchange(topology.tasks, aio_pika.ExchangeType.DIRECT, durable=True)
    await declare_queue(channel, topology, topology.commands, topology.commands, "command")
    await declare_queue(channel, topology, topology.control, topology.control, "control")
    for partition in range(topology.partitions):
        await declare_queue(
            channel,
            topology,
            topology.decider_queue(partition),
            topology.decider,
            str(partition),
            single_active_consumer=True,
        )


async def declare_task_queue(
    channel: AbstractChannel, topology: Topology, task: str, version: str
) -> str:
    """The queue of one task contract, declared and bound; its name."""
    name = topology.task_queue(task, version)
    await declare_queue(channel, topology, name, topology.tasks, task_key(task, version))
    return name


def task_key(task: str, version: str) -> str:
    """``task@version``: the routing key of a contract's queue on the ``tasks`` exchange."""
    return f"{task}@{version}"


class TaskQueues:
    """Task queues declared on demand, each once per process.

    A task is published to its contract's queue only once the queue exists, so
    it waits there for a worker even when none has registered yet (a publish
    with no queue bound would come back unroutable).
    """

    def __init__(self, channel: AbstractChannel, topology: Topology) -> None:
        self._channel = channel
        self._topology = topology
        self._declared: dict[tuple[str, str], asyncio.Future[str]] = {}

    def known(self, task: str, version: str) -> bool:
        """Whether the queue of ``task@version`` was declared by this process."""
        future = self._declared.get((task, version))
        return future is not None and future.done() and future.exception() is None

    async def ensure(self, task: str, version: str) -> str:
        """Declare the queue of ``task@version`` unless done already; its name."""
        key = (task, version)
        future = self._declared.get(key)
        if future is None:
            # Concurrent callers for a new contract share one declaration.
            future = asyncio.ensure_future(
                declare_task_queue(self._channel, self._topology, task, version)
            )
            self._declared[key] = future
        try:
            return await asyncio.shield(future)
        except Exception:
            if self._declared.get(key) is future:
                del self._declared[key]  # declare again next time
            raise


class Outgoing(Protocol):
    """A message to publish (``orbit_runtime.store.OutboxMessage`` is one)."""

    @property
    def exchange(self) -> str: ...
    @property
    def routing_key(self) -> str: ...
    @property
    def body(self) -> bytes: ...
    @property
    def headers(self) -> Mapping[str, str] | None: ...


class Publisher:
    """Persistent, confirmed publishes; many at once are pipelined, not awaited one by one.

    It hands each publish to the channel's aiormq channel with the AMQP
    properties built directly: aio-pika's ``Message`` and ``Exchange`` layer
    added a third to the client's CPU per message. The guarantees are the
    same: a confirm is awaited, a nack raises ``DeliveryError``, and an
    unroutable mandatory message raises ``PublishError`` (the channel is opened
    with ``on_return_raises``).
    """

    def __init__(self, channel: AbstractChannel) -> None:
        self.channel = channel

    async def publish(
        self,
        exchange: str,
        routing_key: str,
        body: bytes,
        *,
        correlation_id: str | None = None,
        reply_to: str | None = None,
        persistent: bool = True,
        headers: dict[str, Any] | None = None,
    ) -> None:
        properties = Basic.Properties(
            content_type="application/json",
            delivery_mode=2 if persistent else 1,
            correlation_id=correlation_id,
            reply_to=reply_to,
            headers=headers,
        )
        if self.channel.is_closed:
            raise aiormq.exceptions.ChannelInvalidStateError(f"{self.channel!r} is closed")
        channel = await self.channel.get_underlay_channel()
        await channel.basic_publish(
            body,
            exchange=exchange,
            routing_key=routing_key,
            properties=properties,
            # The default exchange (direct replies) routes by queue name: no return.
            mandatory=exchange != "",
        )
        metrics.AMQP_PUBLISHED.inc()

    async def publish_many(self, messages: Iterable[Outgoing]) -> None:
        """Publish all, confirmed; raises the first failure after every publish has ended."""
        results = await asyncio.gather(
            *(
                self.publish(
                    message.exchange,
                    message.routing_key,
                    message.body,
                    headers=dict(message.headers) if message.headers else None,
                )
                for message in messages
            ),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result


def delivery_count(message: AbstractIncomingMessage) -> int:
    """How often RabbitMQ delivered this message before (quorum queues count it)."""
    value = (message.headers or {}).get("x-delivery-count", 0)
    return int(value) if isinstance(value, int | str) else 0


def queue_kind(message: AbstractIncomingMessage) -> str:
    """Which of Orbit's queues a message came from (``decider``, ``commands``,
    ``control``, ``tasks``, ...): its exchange without the namespace."""
    exchange = message.exchange or ""
    for kind in ("decider", "commands", "control", "tasks", "dead-letter"):
        if exchange.endswith(f".{kind}"):
            return kind
    return "other"


async def park(message: AbstractIncomingMessage, reason: str) -> None:
    """Dead-letter a message that can never be handled, and say why."""
    log.error(
        "parking a message in the dead-letter queue: %s",
        reason,
        extra={"action": "message.parked", "routing_key": message.routing_key},
    )
    await message.reject(requeue=False)
    metrics.MESSAGES_PARKED.labels(queue_kind(message)).inc()


async def give_back(message: AbstractIncomingMessage, error: BaseException) -> None:
    """Requeue a message that failed for now; past the delivery limit it is parked.

    Never raises: if the channel is gone, the broker gives the message back itself.
    """
    try:
        if delivery_count(message) + 1 >= PARK_AFTER:
            await park(message, f"failed {PARK_AFTER} times, last with {error!r}")
        else:
            await message.nack(requeue=True)
    except Exception as failure:
        log.warning(
            "giving a message back failed (the broker redelivers it): %r",
            failure,
            extra={"action": "message.unsettled"},
        )
