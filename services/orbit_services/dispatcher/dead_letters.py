"""Parked messages, reported to the executions they concern.

Every Orbit queue parks to the fanout exchange ``NS.dead-letter``, bound to
two queues: ``NS.dead-letter`` keeps each parked message for operators, and
``NS.dead-letter.reports`` is read here. For each parked message that an
execution depends on (:func:`orbit_model.parked.notice_for`), the decider is
sent a :class:`~orbit_model.messages.MessageParked`: a parked task
assignment fails its attempt with ``DELIVERY_LIMIT_EXCEEDED``, naming the
last worker that held it, so the step's retry policy applies instead of the
execution waiting for ever.

A report is acked once the notice is confirmed. While Postgres or RabbitMQ
is away it is tried again, unacked, until it goes through; one that fails
for any other reason is dropped with an error logged (its original is still
in ``NS.dead-letter``), so nothing loops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from aio_pika.abc import AbstractIncomingMessage

from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.messages import MessageParked, encode
from orbit_model.parked import death_of, notice_for
from orbit_model.topology import Topology
from orbit_sdk.logs import LogThrottle
from orbit_services.runtime import metrics
from orbit_services.store import OutboxMessage
from orbit_services.store.sessions import SessionStore

log = logging.getLogger("orbit.dispatcher")

RETRY_SECONDS = (0.5, 1.0, 2.0, 5.0)
"""Backoff between tries of a report while Postgres or RabbitMQ is away (the last repeats)."""

KNOWN_TYPES = frozenset(
    {
        "TaskAssignment",
        "TaskResult",
        "DeliveryLost",
        "StartChild",
        "CancelChild",
        "TimerDue",
        "Wake",
        "SignalExecution",
        "CancelExecution",
    }
)
"""The message types a metric label may name (a parked body may say anything)."""

T = TypeVar("T")

Publish = Callable[[Sequence[OutboxMessage]], Awaitable[None]]


class DeadLetterReporter:
    """Tells each parked message's execution that it was parked.

    Args:
        topology: Routes each notice to its execution's partition.
        sessions: Who held a parked task last.
        publish: Sends notices to the decider, confirmed.
    """

    def __init__(self, topology: Topology, sessions: SessionStore, publish: Publish) -> None:
        self._topology = topology
        self._sessions = sessions
        self._publish = publish
        self._failures = LogThrottle(log)
        self._task_queue_prefix = topology.task_queue("", "")[:-1]

    async def on_message(self, message: AbstractIncomingMessage) -> None:
        """Report one parked message, then ack it (see the module for failures)."""
        try:
            notice = await self._notice(message)
            if notice is not None:
                await self._send(notice)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.error(
                "reporting a parked message failed; it stays in %s: %r",
                self._topology.dead_letter,
                error,
                exc_info=error,
                extra={"action": "parked.report_failed"},
            )
            metrics.PARKED_REPORTS.labels("unknown", "failed").inc()
        try:
            await message.ack()
        except Exception as error:  # the channel is gone: the broker redelivers it
            log.warning("acking a parked message failed: %r", error)

    async def _notice(self, message: AbstractIncomingMessage) -> MessageParked | None:
        death = death_of(message.headers)
        if death is None:
            log.warning(
                "a message without x-death reached %s; ignored",
                self._topology.dead_letter_reports,
                extra={"action": "parked.not_parked"},
            )
            return None
        task_queue = death.queue.startswith(self._task_queue_prefix)
        notice = notice_for(message.body, death, task_queue=task_queue)
        if notice is None:
            log.info(
                "a message parked by %s (%s) concerns no execution that waits on it",
                death.queue,
                death.reason,
                extra={"action": "parked.unreported", "queue": death.queue},
            )
            metrics.PARKED_REPORTS.labels("none", "ignored").inc()
            return None
        token = notice.token
        if notice.message_type == "TaskAssignment" and token is not None:
            worker_id = await self._retrying(lambda: self._sessions.last_holder(token))
            notice = notice.model_copy(update={"worker_id": worker_id})
        return notice

    async def _send(self, notice: MessageParked) -> None:
        route = self._topology.decider_route(notice.execution_id)
        message = OutboxMessage(route.exchange, route.routing_key, encode(notice))
        await self._retrying(lambda: self._publish([message]))
        log.warning(
            "%s of execution %s was parked by %s (%s); its execution was told",
            notice.message_type,
            notice.execution_id,
            notice.queue,
            notice.reason,
            extra={
                "action": "parked.reported",
                "execution_id": notice.execution_id,
                "queue": notice.queue,
            },
        )
        kind = notice.message_type if notice.message_type in KNOWN_TYPES else "other"
        metrics.PARKED_REPORTS.labels(kind, "reported").inc()

    async def _retrying(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """``attempt()``, tried again for as long as it fails with ``UNAVAILABLE``."""
        tries = 0
        while True:
            try:
                return await attempt()
            except OrbitError as error:
                if error.code is not ErrorCode.UNAVAILABLE:
                    raise
                self._failures.log(
                    logging.WARNING,
                    "unavailable",
                    "reporting a parked message waits: %s",
                    error.message,
                    extra={"action": "parked.report_deferred"},
                )
            await asyncio.sleep(RETRY_SECONDS[min(tries, len(RETRY_SECONDS) - 1)])
            tries += 1
