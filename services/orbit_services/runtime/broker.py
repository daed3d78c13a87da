"""RabbitMQ for the services: every exchange and queue declared in one place; settling
and answering a request.

Queues are durable quorum queues with a delivery limit and a dead-letter
exchange (:meth:`~orbit_model.topology.Topology.queue_arguments`): a message
that keeps failing is parked in ``NS.dead-letter``, never looped. Each is
made with ``ORBIT_QUEUE_REPLICAS`` replicas on a cluster; one that exists with
another count, or none (made by an Orbit from before), is used as it is,
since RabbitMQ refuses to declare a queue again with other arguments. The
connection and the publisher are the SDK's (:mod:`orbit_sdk.amqp`), counted
in the services' metrics (``orbit_services.runtime.metrics``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import aio_pika
import aiormq
from aio_pika.abc import (
    AbstractChannel,
    AbstractIncomingMessage,
    AbstractQueue,
    ConsumerTag,
)
from pydantic import BaseModel

from orbit_model.messages import encode
from orbit_model.topology import REPLICAS_ARGUMENT, Topology, task_key
from orbit_sdk.amqp import Publisher, settle, translated
from orbit_services.runtime import metrics

log = logging.getLogger("orbit.broker")

PARK_AFTER = 5
"""Deliveries after which a consumer parks a message whose handling keeps failing."""

__all__ = [
    "PARK_AFTER",
    "TaskQueues",
    "consume",
    "declare_queue",
    "declare_task_queue",
    "declare_topology",
    "delivery_count",
    "give_back",
    "park",
    "queue_kind",
    "reply",
]


async def declare_queue(
    channel: AbstractChannel,
    topology: Topology,
    name: str,
    exchange: str,
    routing_key: str,
    *,
    single_active_consumer: bool = False,
) -> AbstractQueue:
    """Declare the durable quorum queue ``name`` and bind it to ``exchange``.

    Raises:
        OrbitError: ``UNAVAILABLE`` when the broker refuses or is away.
    """
    queue = await _declare(channel, name, topology.queue_arguments(single_active_consumer))
    with translated(f"binding queue {name!r}"):
        await queue.bind(exchange, routing_key)
    return queue


_kept_as_they_are: list[str] = []
"""The first queue this process found with another replica count (it is logged once)."""


async def _declare(channel: AbstractChannel, name: str, arguments: dict[str, Any]) -> AbstractQueue:
    """The durable queue ``name`` with ``arguments``, or as it is if it exists with
    another replica count (or none)."""
    with translated(f"declaring queue {name!r}"):
        if await _replicas_agree(channel, name, arguments):
            return await channel.declare_queue(name, durable=True, arguments=arguments)
        if not _kept_as_they_are:  # once per process: an upgrade keeps many
            _kept_as_they_are.append(name)
            log.info(
                "queue %s (and perhaps others) was made with another replica count, or by"
                " an older Orbit: used as it is; `rabbitmq-queues grow` or `shrink` change"
                " the replicas of a queue",
                name,
                extra={"action": "queue.replicas_kept"},
            )
        return await channel.declare_queue(name, passive=True)


async def _replicas_agree(channel: AbstractChannel, name: str, arguments: dict[str, Any]) -> bool:
    """Declare ``name`` with ``arguments`` on a throwaway channel: whether RabbitMQ took
    them, False if it refused them for the replica count alone.

    A refused declaration closes its channel, and the robust channel of the
    caller must not be the one closed (its consumers and publishes would go
    with it), so the first try is made on a plain channel of the same connection.
    """
    underlay = await channel.get_underlay_channel()
    probe = await underlay.connection.channel(publisher_confirms=False)
    try:
        await probe.queue_declare(name, durable=True, arguments=arguments)
    except aiormq.exceptions.ChannelPreconditionFailed as error:
        if REPLICAS_ARGUMENT in str(error):
            return False
        raise
    finally:
        if not probe.is_closed:
            await probe.close()
    return True


async def consume(
    channel: AbstractChannel, name: str, callback: Callable[[AbstractIncomingMessage], Any]
) -> tuple[AbstractQueue, ConsumerTag]:
    """Consume the queue ``name`` (declared already) with ``callback``; the queue and its tag.

    The queue is declared again, passively, through the robust channel: aio-pika
    restores the consumers of the queues declared through a robust channel after
    a reconnect, and only those (a ``get_queue(ensure=False)`` handle is not one,
    and its consumer stays gone after a broker restart).

    Raises:
        OrbitError: ``UNAVAILABLE`` when the queue does not exist or the broker is away.
    """
    with translated(f"consuming queue {name!r}"):
        queue = await channel.declare_queue(name, passive=True)
        return queue, await queue.consume(callback)


async def declare_topology(channel: AbstractChannel, topology: Topology) -> None:
    """Declare every exchange and every fixed queue (task queues come with their workers).

    Raises:
        OrbitError: ``UNAVAILABLE`` when the broker refuses or is away.
    """
    with translated(f"declaring the exchanges of namespace {topology.namespace!r}"):
        dead_letter = await channel.declare_exchange(
            topology.dead_letter, aio_pika.ExchangeType.FANOUT, durable=True
        )
        parked = await _declare(channel, topology.dead_letter, topology.parked_arguments())
        await parked.bind(dead_letter)
        # No delivery limit and no dead-letter exchange: a report must neither loop
        # back here nor be dropped while the dispatcher waits out an outage.
        reports = await _declare(channel, topology.dead_letter_reports, topology.parked_arguments())
        await reports.bind(dead_letter)
        for name in (topology.commands, topology.decider, topology.results, topology.control):
            await channel.declare_exchange(name, aio_pika.ExchangeType.DIRECT, durable=True)
        await channel.declare_exchange(topology.tasks, aio_pika.ExchangeType.DIRECT, durable=True)
    await declare_queue(channel, topology, topology.commands, topology.commands, "command")
    await declare_queue(channel, topology, topology.control, topology.control, "control")
    for partition in range(topology.partitions):
        queue = await declare_queue(
            channel,
            topology,
            topology.decider_queue(partition),
            topology.decider,
            str(partition),
            single_active_consumer=True,
        )
        # Workers' results come in through an exchange of their own: a worker may
        # write to it, never to the decider's (docs/security.md).
        with translated(f"binding {queue.name!r} to {topology.results!r}"):
            await queue.bind(topology.results, str(partition))


async def declare_task_queue(
    channel: AbstractChannel, topology: Topology, task: str, version: str
) -> str:
    """The queue of one task contract, declared and bound; its name."""
    name = topology.task_queue(task, version)
    await declare_queue(channel, topology, name, topology.tasks, task_key(task, version))
    return name


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
            raise  # UNAVAILABLE already (declare_queue)


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
    if delivery_count(message) + 1 >= PARK_AFTER:
        outcome = park(message, f"failed {PARK_AFTER} times, last with {error!r}")
    else:
        outcome = message.nack(requeue=True)
    await settle(outcome, log)


async def reply(
    publisher: Publisher, request: AbstractIncomingMessage, answer: BaseModel, *, action: str
) -> None:
    """Send ``answer`` to ``request``'s ``reply_to`` queue (if it names one), with its
    correlation id, not persisted: the requester waits for it, with a timeout.

    Never raises: a failure is logged with ``action``. The request was carried out, and
    redelivering it to answer would carry it out twice.
    """
    if not request.reply_to:
        return
    try:
        await publisher.publish(
            "",
            request.reply_to,
            encode(answer),
            correlation_id=request.correlation_id,
            persistent=False,
        )
    except Exception as error:
        log.warning("could not answer on %s: %r", request.reply_to, error, extra={"action": action})
