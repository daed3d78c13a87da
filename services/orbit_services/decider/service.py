"""The decider service: consumes its partitions of the decider queue and commits decisions.

Which partitions are its own, the leases in Postgres say
(:mod:`orbit_services.decider.partitions`): the deciders of an installation
share them evenly, and take over those of one that stops or dies.

Messages are collected as they arrive (up to ``ORBIT_DECIDER_BATCH_SIZE``),
decided together and committed in one transaction, then acked; the outbox
rows of the batch are published right after. A message that is not a
decider input is parked at once. While Postgres or RabbitMQ is away,
a batch is held and retried with backoff, so an outage never uses up an
input's deliveries. If a batch fails for another reason, each execution's
inputs are tried alone, so one bad input cannot hold up the others; those
that still fail go back to the queue, and past the delivery limit to the
dead-letter queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from dataclasses import dataclass

from aio_pika.abc import (
    AbstractChannel,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustConnection,
    ConsumerTag,
)

from orbit_model.broker_roles import Role
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.messages import DeciderInput, MalformedMessage, decode_decider_input
from orbit_sdk.amqp import Publisher, connect, is_up, open_channel, translated
from orbit_sdk.logs import LogThrottle
from orbit_services.decider.deciding import Committed, Deciding
from orbit_services.decider.partitions import LeaseTimes, PartitionLeases
from orbit_services.decider.spans import SpanRecorder
from orbit_services.runtime import metrics
from orbit_services.runtime.broker import TaskQueues, consume, declare_topology, give_back, park
from orbit_services.runtime.clock import PostgresClock
from orbit_services.runtime.host import Host, cancel
from orbit_services.runtime.metrics import MetricsEndpoint
from orbit_services.runtime.senders import SenderBook, Senders, check_identity
from orbit_services.runtime.settings import Settings
from orbit_services.store import EventStore
from orbit_services.store.leases import LeaseStore
from orbit_services.store.outbox import OutboxRelay
from orbit_services.store.pool import IDLE_TRANSACTION_SECONDS

log = logging.getLogger("orbit.decider")


_SETTLE_AHEAD = 4
"""Committed batches the decider may be ahead of their publishing."""
_SETTLE_TIMEOUT = 10.0
"""Seconds stopping waits for committed batches to be published and acked."""
_CANCEL_TIMEOUT = 2.0
"""Seconds a consumer's cancel may take before the partition is given up regardless."""


class _Stopping(OrbitError):
    """The service stops while a batch waits to be retried."""

    def __init__(self) -> None:
        super().__init__(ErrorCode.UNAVAILABLE, "the decider is stopping")


@dataclass(frozen=True)
class _Received:
    message: AbstractIncomingMessage
    input: DeciderInput
    partition: int
    """The partition queue it came from."""


def _partition_of(message: AbstractIncomingMessage) -> int | None:
    # Each partition queue is bound by its number, so the routing key names it.
    key = message.routing_key or ""
    return int(key) if key.isdigit() else None


def new_decider_id() -> str:
    """A decider's id: where it runs, and enough randomness that a restart is a new one."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class DeciderService:
    name = "decider"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topology = settings.topology
        self._inbox: asyncio.Queue[_Received] = asyncio.Queue()
        self._committed: asyncio.Queue[tuple[list[_Received], Committed]] = asyncio.Queue(
            maxsize=_SETTLE_AHEAD
        )
        """Committed batches waiting to be published and acked, in commit order."""
        self._tasks: list[asyncio.Task[None]] = []
        self.decider_id = settings.decider_id or new_decider_id()
        self._queues: dict[int, AbstractQueue] = {}
        self._consumers: dict[int, ConsumerTag] = {}
        """The partitions consumed now, with their consumer tags."""
        self._consuming: AbstractChannel | None = None
        self._host = Host(self.name)
        self._deciding: Deciding | None = None
        self._relay: OutboxRelay | None = None
        self._busy = asyncio.Lock()
        """Held while a batch is decided and committed: stop() waits for it."""
        self.batches = 0
        """Batches committed so far (for tests and metrics)."""
        self._metrics = MetricsEndpoint(settings.metrics_port, settings.http_host)
        self._deferrals = LogThrottle(log)
        """While Postgres or RabbitMQ is away every batch is deferred: one line per 10 s."""
        self._senders = Senders(settings, "decider")

    async def start(self) -> None:
        """Connect, declare the topology, claim partitions and consume them; return once serving.

        Raises:
            OrbitError: ``UNAVAILABLE`` when Postgres or RabbitMQ cannot be
                reached (nothing is left open).
        """
        await self._host.start(self._start)

    async def _start(self, host: Host) -> None:
        settings = self.settings
        check_identity(settings, Role.DECIDER)
        times = LeaseTimes(settings.decider_lease_ms / 1000)
        store = await host.acquire(
            "postgres", _connect_store(settings.database_url, times), lambda store: store.close
        )
        # Heartbeats within the lease: a decider frozen or cut off from RabbitMQ loses
        # its connection, and the queues of its partitions, about when its leases lapse.
        connection = await host.acquire(
            "rabbitmq",
            connect(settings.amqp_url, times.amqp_heartbeat_seconds),
            lambda connection: connection.close,
        )
        # After a reconnect the cached states may predate what others wrote meanwhile.
        connection.reconnect_callbacks.add(self._reconnected)
        publishing = await open_channel(connection)
        await declare_topology(publishing, self.topology)
        self._relay = OutboxRelay(store.outbox, Publisher(publishing), service=self.name)
        spans = SpanRecorder.from_endpoint(settings.otlp_endpoint)
        if spans is not None:
            host.on_stop("spans", lambda: _shut_down(spans))
        # Declarations get a channel of their own: a refused declare closes its channel.
        declaring = await open_channel(connection)
        # Every time the decider compares (a timer's due time, a heartbeat's age) is
        # Postgres's, so that no process's own clock matters (runtime.clock).
        clock = PostgresClock(store.now_ms)
        await clock.sync()
        self._deciding = Deciding(
            store,
            self.topology,
            settings,
            clock=clock.now,
            spans=spans,
            task_queues=TaskQueues(declaring, self.topology),
            sender_book=SenderBook(settings.namespace, store.worker_users.tasks_of),
        )
        self._consuming = await open_channel(connection, prefetch=settings.decider_batch_size)
        self._tasks = [
            asyncio.create_task(self._decide_forever(), name="decider.batches"),
            asyncio.create_task(self._settle_forever(), name="decider.settle"),
        ]
        host.on_stop("the batches in hand", self._finish_batches)
        host.run(self._relay.run_sweeper(), "decider.outbox")
        host.run(clock.run(), "decider.clock")
        await self._start_leases(host, times, connection)
        self._metrics.start()
        host.on_stop("metrics", self._metrics.stop)
        log.info(
            "decider %s consumes partitions %s",
            self.decider_id,
            sorted(self._consumers),
            extra={"action": "decider.started"},
        )

    async def _start_leases(
        self, host: Host, times: LeaseTimes, connection: AbstractRobustConnection
    ) -> None:
        """Take a first share of the partitions and beat from now on. The beats run on a
        pool of their own, bounded by the fence: never behind a batch, never hung on a
        silent link to Postgres; and none renews while ``connection`` is down."""
        lease_store = await host.acquire(
            "the leases' pool",
            LeaseStore.open(self.settings.database_url, times.beat_timeout),
            lambda lease_store: lease_store.close,
        )
        leases = PartitionLeases(
            lease_store,
            self.decider_id,
            self.topology.partitions,
            times,
            take=self._take,
            give_up=self._give_up,
            reachable=lambda: is_up(connection),
        )
        # Stops consuming, finishes the batch, leaves: the others take over at once.
        # Registered before they are taken: a start that fails after taking some gives them up.
        host.on_stop("the partitions", leases.stop)
        await leases.start()
        host.run(leases.run(), "decider.leases")

    @property
    def partitions(self) -> frozenset[int]:
        """The partitions this decider consumes now."""
        return frozenset(self._consumers)

    async def _take(self, partition: int) -> None:
        """Consume ``partition``, from the history: no state cached before is trusted.

        Raises:
            OrbitError: ``UNAVAILABLE`` if RabbitMQ is away (tried again at the next beat).
        """
        assert self._consuming is not None
        self._drop_states({partition})
        queue = self._queues.get(partition)
        if queue is None:
            queue, tag = await consume(
                self._consuming, self.topology.decider_queue(partition), self._on_message
            )
            self._queues[partition] = queue
        else:
            with translated(f"consuming partition {partition}"):
                tag = await queue.consume(self._on_message)
        self._consumers[partition] = tag
        metrics.DECIDER_PARTITIONS.set(len(self._consumers))

    async def _give_up(self, partitions: frozenset[int]) -> None:
        """Stop consuming ``partitions``: cancel their consumers, let the batch in hand
        finish and be settled, give back what was received of them and not decided,
        and drop their cached states. Never raises."""
        for partition in partitions:
            tag = self._consumers.pop(partition, None)
            if tag is not None:
                # A closed channel consumes nothing; a silent one never answers the cancel
                # (the broker drops its consumer with its connection, on the heartbeats).
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(_CANCEL_TIMEOUT):
                        await self._queues[partition].cancel(tag)
        metrics.DECIDER_PARTITIONS.set(len(self._consumers))
        async with self._busy:
            kept: list[_Received] = []
            while not self._inbox.empty():
                received = self._inbox.get_nowait()
                if received.partition in partitions:
                    await _requeue(received)
                else:
                    kept.append(received)
            for received in kept:
                self._inbox.put_nowait(received)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_SETTLE_TIMEOUT):
                    await self._committed.join()
            self._drop_states(partitions)

    def _drop_states(self, partitions: set[int] | frozenset[int]) -> None:
        if self._deciding is not None:
            partition_of = self.topology.partition_of
            self._deciding.states.drop_where(
                lambda execution_id: partition_of(execution_id) in partitions
            )

    def _reconnected(self, _connection: object) -> None:
        log.warning(
            "reconnected to RabbitMQ; the cached states are read again",
            extra={"action": "decider.reconnected"},
        )
        if self._deciding is not None:
            self._deciding.states.clear()

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        try:
            decoded = decode_decider_input(message.body)
        except MalformedMessage as error:
            await park(message, error.message)
            return
        if self._senders.refused(message, decoded.type):
            with contextlib.suppress(Exception):  # if unsettled, it is refused again
                await message.ack()
            return
        received = _Received(message, decoded, _partition_of(message) or 0)
        if received.partition not in self._consumers:
            await _requeue(received)  # delivered as the partition was given up
            return
        await self._inbox.put(received)

    async def _decide_forever(self) -> None:
        while True:
            batch = [await self._inbox.get()]
            async with self._busy:
                while len(batch) < self.settings.decider_batch_size and not self._inbox.empty():
                    batch.append(self._inbox.get_nowait())
                batch = await self._mine(batch)
                if not batch:
                    continue
                try:
                    await self._decide(batch)
                except Exception:
                    # A bug, not an input: say so loudly, give the batch back, keep serving.
                    log.exception("deciding a batch failed", extra={"action": "decide.crashed"})
                    for received in batch:
                        with contextlib.suppress(Exception):
                            await received.message.nack(requeue=True)

    async def _mine(self, batch: list[_Received]) -> list[_Received]:
        """The inputs of partitions still consumed; the others go back to their queue
        (their partition was given up while they waited)."""
        mine = [received for received in batch if received.partition in self._consumers]
        if len(mine) < len(batch):
            for received in batch:
                if received.partition not in self._consumers:
                    await _requeue(received)
        return mine

    async def _decide(self, batch: list[_Received]) -> None:
        try:
            committed = await self._handle(batch)
        except _Stopping:
            for received in batch:  # back to the queue, for whoever holds it next
                await _requeue(received)
            return
        except Exception as error:
            if len(batch) > 1:
                await self._decide_alone(batch)
                return
            log.warning(
                "decision failed: %r",
                error,
                extra={"action": "decide.failed", "execution_id": batch[0].input.execution_id},
            )
            await give_back(batch[0].message, error)
            return
        await self._committed.put((batch, committed))

    async def _decide_alone(self, batch: list[_Received]) -> None:
        """Decide each execution of a failed batch on its own, to isolate the bad input."""
        by_execution: dict[str, list[_Received]] = {}
        for received in batch:
            by_execution.setdefault(received.input.execution_id, []).append(received)
        for execution_id, group in by_execution.items():
            try:
                committed = await self._handle(group)
            except _Stopping:
                for received in group:
                    await _requeue(received)
                continue
            except Exception as error:
                log.warning(
                    "decision failed: %r",
                    error,
                    extra={"action": "decide.failed", "execution_id": execution_id},
                )
                for received in group:
                    await give_back(received.message, error)
                continue
            await self._committed.put((group, committed))

    async def _handle(self, batch: list[_Received]) -> Committed:
        """Decide and commit; while Postgres is away or races go on, wait and try again.

        Infrastructure trouble must not count against an input's delivery limit:
        the messages stay unacked in our hands, and the batch is retried with
        backoff until it commits or the service stops.

        Raises:
            _Stopping: The service is stopping; the batch was not committed.
            Exception: Anything else is the input's fault (or a bug).
        """
        assert self._deciding is not None
        delay = 0.05
        while True:
            try:
                return await self._deciding.handle(
                    [received.input for received in batch],
                    # Where senders are checked, a result only from who may answer its task.
                    [received.message.user_id for received in batch]
                    if self._senders.checked
                    else (),
                )
            except OrbitError as error:
                # Postgres or RabbitMQ away for a while, or a race lost too often: try
                # again later.
                if not error.is_transient:
                    raise
                if self._host.stopping or any(
                    received.partition not in self._consumers for received in batch
                ):
                    raise _Stopping from error  # or given up: another decider takes it
                self._deferrals.log(
                    logging.WARNING,
                    str(error.code),
                    "decision deferred for %.2f s: %r",
                    delay,
                    error,
                    extra={"action": "decide.deferred", "count": len(batch)},
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _settle_forever(self) -> None:
        """Publish and ack the committed batches in order, while the next is decided.

        The decider would otherwise wait for the broker's confirms between
        batches. One batch at a time, in commit order, so messages to one
        queue keep the order of the commits that wrote them.
        """
        while True:
            batch, committed = await self._committed.get()
            try:
                await self._settle(batch, committed)
            except Exception:  # publish and ack failures are handled inside; a bug is not
                log.exception("settling a batch failed", extra={"action": "decide.settle_failed"})
            finally:
                self._committed.task_done()

    async def _settle(self, batch: list[_Received], committed: Committed) -> None:
        """Publish the outbox of the batch, then ack the inputs, durable since the commit.

        Publishing first puts the next hop (a task to its worker) before the acks.
        """
        assert self._relay is not None
        self.batches += 1
        await self._relay.publish_committed(committed.outbox_ids, committed.messages)
        for received in batch:
            try:
                await received.message.ack()
            except Exception as error:
                # Durable already: a redelivery of it is decided again and changes nothing.
                log.warning("ack failed: %r", error, extra={"action": "decide.ack_failed"})

    async def stop(self) -> None:
        """Give up the partitions, finish the batch in hand, close every connection."""
        await self._host.stop()

    async def _finish_batches(self) -> None:
        """Let the batch in hand finish and what is committed be published and acked,
        then give back what was received but not decided."""
        async with self._busy:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_SETTLE_TIMEOUT):
                    await self._committed.join()
            for task in self._tasks:
                await cancel(task)
        self._tasks = []
        while not self._inbox.empty():
            received = self._inbox.get_nowait()
            with contextlib.suppress(Exception):
                await received.message.nack(requeue=True)


async def _shut_down(spans: SpanRecorder) -> None:
    """Send the spans still buffered (in a thread: the exporter blocks)."""
    with contextlib.suppress(Exception):
        await asyncio.to_thread(spans.shutdown)


async def _connect_store(url: str, times: LeaseTimes) -> EventStore:
    """The decider's store, every wait on Postgres bounded by a lease.

    A statement that takes a lease is given up (UNAVAILABLE: the batch is tried again
    later): on a silent link it would hold the batch, and with it the unacked inputs of
    partitions this decider is giving up, for as long as TCP waits. A transaction of its
    own cut off halfway ends within a lease on the server too, so the rows it locked
    (outbox rows a sweep took) wait for no longer.
    """
    return await EventStore.connect(
        url,
        timeout=times.lease_seconds,
        idle_transaction_seconds=min(IDLE_TRANSACTION_SECONDS, times.lease_seconds),
    )


async def _requeue(received: _Received) -> None:
    with contextlib.suppress(Exception):  # if unsettled, the broker gives it back itself
        await received.message.nack(requeue=True)
