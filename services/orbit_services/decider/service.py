"""The decider service: consumes its partitions of the decider queue and commits decisions.

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
from dataclasses import dataclass

from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractRobustConnection

from orbit_model.broker_roles import Role
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.messages import DeciderInput, MalformedMessage, decode_decider_input
from orbit_model.topology import Topology
from orbit_sdk.amqp import Publisher, connect, open_channel
from orbit_sdk.logs import LogThrottle
from orbit_services.decider.deciding import Committed, Deciding
from orbit_services.decider.spans import SpanRecorder
from orbit_services.runtime.broker import TaskQueues, consume, declare_topology, give_back, park
from orbit_services.runtime.metrics import MetricsEndpoint
from orbit_services.runtime.senders import Senders, check_identity
from orbit_services.runtime.settings import Settings
from orbit_services.store import EventStore
from orbit_services.store.outbox import OutboxRelay

log = logging.getLogger("orbit.decider")


TRANSIENT = frozenset({ErrorCode.UNAVAILABLE, ErrorCode.CONFLICT})
"""Postgres or RabbitMQ away for a while (the store and the broker say so, having
translated their drivers' errors), or a race lost too often: try again later."""


def _transient(error: BaseException) -> bool:
    return isinstance(error, OrbitError) and error.code in TRANSIENT


_SETTLE_AHEAD = 4
"""Committed batches the decider may be ahead of their publishing."""
_SETTLE_TIMEOUT = 10.0
"""Seconds stopping waits for committed batches to be published and acked."""


class _Stopping(OrbitError):
    """The service stops while a batch waits to be retried."""

    def __init__(self) -> None:
        super().__init__(ErrorCode.UNAVAILABLE, "the decider is stopping")


@dataclass(frozen=True)
class _Received:
    message: AbstractIncomingMessage
    input: DeciderInput


class DeciderService:
    name = "decider"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topology = Topology(settings.namespace, settings.decider_partitions)
        self._inbox: asyncio.Queue[_Received] = asyncio.Queue()
        self._committed: asyncio.Queue[tuple[list[_Received], Committed]] = asyncio.Queue(
            maxsize=_SETTLE_AHEAD
        )
        """Committed batches waiting to be published and acked, in commit order."""
        self._tasks: list[asyncio.Task[None]] = []
        self._consumers: list[tuple[object, str]] = []
        self._connection: AbstractRobustConnection | None = None
        self._store: EventStore | None = None
        self._deciding: Deciding | None = None
        self._relay: OutboxRelay | None = None
        self._stopping = False
        self._busy = asyncio.Lock()
        """Held while a batch is decided and committed: stop() waits for it."""
        self.batches = 0
        """Batches committed so far (for tests and metrics)."""
        self._metrics = MetricsEndpoint(settings.metrics_port, settings.http_host)
        self._spans: SpanRecorder | None = None
        self._deferrals = LogThrottle(log)
        """While Postgres or RabbitMQ is away every batch is deferred: one line per 10 s."""
        self._senders = Senders(settings, "decider")

    async def start(self) -> None:
        settings = self.settings
        check_identity(settings, Role.DECIDER)
        self._store = await EventStore.connect(settings.database_url)
        self._connection = await connect(settings.amqp_url)
        # After a reconnect the cached states may predate what others wrote meanwhile.
        self._connection.reconnect_callbacks.add(self._reconnected)
        publishing = await open_channel(self._connection)
        await declare_topology(publishing, self.topology)
        self._relay = OutboxRelay(self._store.outbox, Publisher(publishing), service=self.name)
        self._spans = SpanRecorder.from_endpoint(settings.otlp_endpoint)
        # Declarations get a channel of their own: a refused declare closes its channel.
        declaring = await open_channel(self._connection)
        self._deciding = Deciding(
            self._store,
            self.topology,
            settings,
            spans=self._spans,
            task_queues=TaskQueues(declaring, self.topology),
        )
        consuming = await open_channel(self._connection, prefetch=settings.decider_batch_size)
        self._tasks = [
            asyncio.create_task(self._decide_forever(), name="decider.batches"),
            asyncio.create_task(self._settle_forever(), name="decider.settle"),
            asyncio.create_task(self._relay.run_sweeper(), name="decider.outbox"),
        ]
        await self._consume(consuming)
        self._metrics.start()

    async def _consume(self, channel: AbstractChannel) -> None:
        for partition in range(self.topology.partitions):
            name = self.topology.decider_queue(partition)
            self._consumers.append(await consume(channel, name, self._on_message))

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
        await self._inbox.put(_Received(message, decoded))

    async def _decide_forever(self) -> None:
        while True:
            batch = [await self._inbox.get()]
            async with self._busy:
                while len(batch) < self.settings.decider_batch_size and not self._inbox.empty():
                    batch.append(self._inbox.get_nowait())
                try:
                    await self._decide(batch)
                except Exception:
                    # A bug, not an input: say so loudly, give the batch back, keep serving.
                    log.exception("deciding a batch failed", extra={"action": "decide.crashed"})
                    for received in batch:
                        with contextlib.suppress(Exception):
                            await received.message.nack(requeue=True)

    async def _decide(self, batch: list[_Received]) -> None:
        try:
            committed = await self._handle(batch)
        except _Stopping:
            return  # left unacked: the broker hands them to the next decider
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
                return
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
                return await self._deciding.handle([received.input for received in batch])
            except OrbitError as error:
                if not _transient(error):
                    raise
                if self._stopping:
                    raise _Stopping from error
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
        self._stopping = True
        await self._metrics.stop()
        for queue, tag in self._consumers:
            with contextlib.suppress(Exception):
                await queue.cancel(tag)  # type: ignore[attr-defined]
        self._consumers.clear()
        # Let the batch in hand finish and what is committed be published and acked,
        # then give back what was received but not decided.
        async with self._busy:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_SETTLE_TIMEOUT):
                    await self._committed.join()
            for task in self._tasks:
                task.cancel()
            for task in self._tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        while not self._inbox.empty():
            received = self._inbox.get_nowait()
            with contextlib.suppress(Exception):
                await received.message.nack(requeue=True)
        if self._connection is not None:
            await self._connection.close()
        if self._store is not None:
            await self._store.close()
        if self._spans is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self._spans.shutdown)
