"""The dispatcher service: worker control, off the hot path.

It consumes ``NS.control``: register, heartbeat and unregister requests,
answered on their ``reply_to`` with the same correlation id. A registration
declares the queues of the worker's contracts and opens a session; a
heartbeat records what the worker holds and answers with what to cancel; an
unregistration reports what the worker still held to the decider as lost.
It also reads ``NS.dead-letter.reports`` and tells each parked message's
execution about it (:mod:`orbit_services.dispatcher.dead_letters`).
Tasks never pass through here: the decider publishes each assignment to its
task queue itself. The rules live in :mod:`orbit_services.dispatcher.control`; this
is wiring.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Sequence

from aio_pika.abc import (
    AbstractChannel,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustConnection,
    ConsumerTag,
)

from orbit_model.broker_roles import Role
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.messages import (
    ControlError,
    ControlReply,
    ControlRequest,
    DeliveryLost,
    MalformedMessage,
    decode_control_request,
)
from orbit_sdk.amqp import Publisher, connect, open_channel, settle
from orbit_services.dispatcher.control import ControlHandler, control_error
from orbit_services.dispatcher.dead_letters import DeadLetterReporter
from orbit_services.runtime import metrics
from orbit_services.runtime.broker import TaskQueues, consume, declare_topology, reply
from orbit_services.runtime.host import Host
from orbit_services.runtime.metrics import MetricsEndpoint
from orbit_services.runtime.senders import Senders, check_identity
from orbit_services.runtime.settings import Settings
from orbit_services.store import EventStore, OutboxMessage
from orbit_services.store.sessions import DISPATCHER_BEAT_SECONDS

log = logging.getLogger("orbit.dispatcher")

SESSION_COUNT_SECONDS = 5.0
"""How often the dispatcher counts the open worker sessions (and after each
registration and unregistration)."""


class _InFlight:
    """Counts handlers running, so stopping can wait for them."""

    def __init__(self) -> None:
        self._count = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def __enter__(self) -> None:
        self._count += 1
        self._idle.clear()

    def __exit__(self, *_: object) -> None:
        self._count -= 1
        if self._count == 0:
            self._idle.set()

    async def drained(self, timeout: float) -> bool:
        try:
            async with asyncio.timeout(timeout):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True


class DispatcherService:
    """Answers worker control: registrations, heartbeats, unregistrations.

    Args:
        settings: Orbit's settings.
        stop_timeout: Seconds :meth:`stop` waits for answers in flight.
    """

    name = "dispatcher"

    def __init__(self, settings: Settings, stop_timeout: float = 10.0):
        self.settings = settings
        self.topology = settings.topology
        self.stop_timeout = stop_timeout
        self._store: EventStore | None = None
        self._connection: AbstractRobustConnection | None = None
        self._consumers: list[tuple[AbstractQueue, ConsumerTag]] = []
        self._inflight = _InFlight()
        self._metrics = MetricsEndpoint(settings.metrics_port, settings.http_host)
        self._senders = Senders(settings, "dispatcher")
        self._host = Host(self.name)
        self._control_channel: AbstractChannel | None = None
        self.dispatcher_id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        """Names this dispatcher in the ``dispatchers`` table."""

    async def start(self) -> None:
        """Connect to Postgres and RabbitMQ, declare the topology, start consuming.

        Raises:
            OrbitError: ``UNAVAILABLE`` when Postgres or RabbitMQ cannot be
                reached (nothing is left open).
        """
        await self._host.start(self._start)

    async def _start(self, host: Host) -> None:
        check_identity(self.settings, Role.DISPATCHER)
        self._store = store = await host.acquire(
            "postgres", EventStore.connect(self.settings.database_url), lambda store: store.close
        )
        self._connection = connection = await host.acquire(
            "rabbitmq", connect(self.settings.amqp_url), lambda connection: connection.close
        )
        # Queue declarations and lost-task notices get a channel of their own: a
        # refused declare closes its channel, and must not take the consumer along.
        declaring = await open_channel(connection)
        await declare_topology(declaring, self.topology)
        self._notices = Publisher(declaring)
        self._queues = TaskQueues(declaring, self.topology)
        self._control_channel = control_channel = await open_channel(connection, 32)
        self._replies = Publisher(control_channel)
        self._control = ControlHandler(
            store,
            self._queues,
            self._publish_lost,
            heartbeat_interval_ms=self.settings.heartbeat_interval_ms,
            session_timeout_ms=self.settings.session_timeout_ms,
            users_checked=self._senders.checked,
        )
        self._sessions = store.sessions
        host.run(self._count_sessions(), "dispatcher.sessions")
        reports = DeadLetterReporter(
            self.topology, store.sessions, self._notices.publish_many, self._senders.checked
        )
        # Reports get their own channel: one waiting out an outage holds no control request.
        reports_channel = await open_channel(connection, 8)
        host.on_stop("consumers", self._stop_consuming)
        self._consumers.append(
            await consume(control_channel, self.topology.control, self._on_control)
        )
        self._consumers.append(
            await consume(reports_channel, self.topology.dead_letter_reports, reports.on_message)
        )
        host.run(self._beat(), "dispatcher.beat")
        self._metrics.start()
        host.on_stop("metrics", self._metrics.stop)

    async def stop(self) -> None:
        """Stop consuming, let answers in flight end, close."""
        await self._host.stop()

    async def _stop_consuming(self) -> None:
        for queue, tag in self._consumers:
            try:
                await queue.cancel(tag)
            except Exception as error:  # the channel may be gone already
                log.warning("cancelling the consumer of %s failed: %r", queue.name, error)
        self._consumers = []
        await asyncio.sleep(0)  # deliveries already read start their handlers
        if not await self._inflight.drained(self.stop_timeout):
            log.warning("stopping with messages in flight; the broker will redeliver them")

    async def _count_sessions(self) -> None:
        """Keep ``orbit_worker_sessions_online`` up to date: sessions also end in the
        timer service (expired), so the gauge is counted in Postgres, not tracked."""
        while True:
            await self._refresh_sessions()
            await asyncio.sleep(SESSION_COUNT_SECONDS)

    async def _beat(self) -> None:
        """Say in Postgres that this dispatcher is up: while none is, the timer
        service expires no worker session (their heartbeats come through here).

        Only while it really takes heartbeats: with its RabbitMQ connection or
        control channel down, workers' heartbeats do not reach it either.
        """
        while True:
            try:
                if self._taking_requests():
                    await self._sessions.dispatcher_beat(
                        self.dispatcher_id, self.settings.session_timeout_ms
                    )
            except Exception as error:
                log.warning(
                    "recording the dispatcher's beat failed: %r",
                    error,
                    extra={"action": "dispatcher.beat_failed"},
                )
            await asyncio.sleep(DISPATCHER_BEAT_SECONDS)

    def _taking_requests(self) -> bool:
        connection, channel = self._connection, self._control_channel
        return (
            bool(self._consumers)
            and connection is not None
            and not connection.is_closed
            and channel is not None
            and not channel.is_closed
        )

    async def _refresh_sessions(self) -> None:
        try:
            metrics.SESSIONS_ONLINE.set(await self._sessions.online())
        except Exception as error:
            log.debug("counting sessions failed: %r", error)

    async def _on_control(self, message: AbstractIncomingMessage) -> None:
        with self._inflight:
            answer: ControlReply
            try:
                request = decode_control_request(message.body)
            except MalformedMessage as error:
                answer = control_error(error)
            else:
                answer = await self._answer(message, request)
            await reply(self._replies, message, answer, action="control.reply_failed")
            await settle(message.ack(), log)

    async def _answer(
        self, message: AbstractIncomingMessage, request: ControlRequest
    ) -> ControlReply:
        if self._senders.refused(message, request.type):
            return control_error(
                OrbitError(
                    ErrorCode.PERMISSION_DENIED,
                    self._senders.refusal(
                        message,
                        request.type,
                        "workers log in as worker users: `orbit broker user add --role worker`",
                        request.v,
                    ),
                )
            )
        try:
            reply = await self._control.handle(
                request, self._senders.role(message), message.user_id
            )
            if request.type != "Heartbeat":
                await self._refresh_sessions()
        except Exception as error:
            # The requester waits with a timeout: tell it now rather
            # than requeue a request it will have given up on.
            log.exception("a %s request failed", request.type)
            return control_error(
                OrbitError(ErrorCode.UNAVAILABLE, f"the dispatcher failed: {error!r}")
            )
        if (
            self._senders.checked
            and isinstance(reply, ControlError)
            and reply.error.code == ErrorCode.RESERVED_TASK
        ):
            self._senders.count(message, request.type, "reserved_task")
        return reply

    async def _publish_lost(self, notices: Sequence[DeliveryLost]) -> None:
        await self._notices.publish_many(
            [OutboxMessage.to(self.topology.decider_route(n.execution_id), n) for n in notices]
        )
