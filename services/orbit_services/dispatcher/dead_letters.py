"""Parked messages, reported to the executions they concern.

Every Orbit queue parks to the fanout exchange ``NS.dead-letter``, bound to
two queues: ``NS.dead-letter`` keeps each parked message for operators, and
``NS.dead-letter.reports`` is read here. For each parked message that an
execution depends on (:func:`orbit_model.parked.notice_for`), the decider is
sent a :class:`~orbit_model.messages.MessageParked`: a parked task
assignment fails its attempt with ``DELIVERY_LIMIT_EXCEEDED``, naming the
last worker that held it, so the step's retry policy applies instead of the
execution waiting for ever. With a RabbitMQ user per role, a parked message
is reported only if its sender (its AMQP ``user_id``, kept as RabbitMQ
parks it) could have sent it there (:func:`orbit_model.parked.may_report`):
a client's result-shaped body sent to ``NS.commands`` fails no attempt.

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

from orbit_model.broker_roles import role_of
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.messages import MessageParked
from orbit_model.parked import Death, death_of, may_report, notice_for
from orbit_model.topology import Topology
from orbit_sdk.logs import LogThrottle
from orbit_services.runtime import metrics
from orbit_services.runtime.senders import sender_of
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
        checked: Whether senders are checked (a RabbitMQ user per role): a parked
            message is then reported only if its sender could have sent it.
    """

    def __init__(
        self, topology: Topology, sessions: SessionStore, publish: Publish, checked: bool = False
    ) -> None:
        self._topology = topology
        self._sessions = sessions
        self._publish = publish
        self._checked = checked
        self._failures = LogThrottle(log)
        self._refusals = LogThrottle(log)
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
        if self._checked and not self._sent_by_who_may(message, death, notice):
            return None
        # The decider holds a parked result's sender to its task, as a result's.
        notice = notice.model_copy(update={"sender": message.user_id})
        token = notice.token
        if notice.message_type == "TaskAssignment" and token is not None:
            worker_id = await self._retrying(lambda: self._sessions.last_holder(token))
            notice = notice.model_copy(update={"worker_id": worker_id})
        return notice

    def _sent_by_who_may(
        self, message: AbstractIncomingMessage, death: Death, notice: MessageParked
    ) -> bool:
        """Whether the parked message's sender could have sent it where it was parked;
        if not, it is counted (``refused``) and logged, at most once per 10 s."""
        role = role_of(self._topology.namespace, message.user_id)
        if may_report(self._topology, death, notice.message_type, role):
            return True
        kind = notice.message_type if notice.message_type in KNOWN_TYPES else "other"
        metrics.PARKED_REPORTS.labels(kind, "refused").inc()
        self._refusals.log(
            logging.WARNING,
            kind,
            "a %s parked by %s was sent by %s, who could not have sent it there; its"
            " execution is not told",
            notice.message_type,
            death.queue,
            sender_of(message.user_id),
            extra={"action": "parked.refused", "queue": death.queue},
        )
        return False

    async def _send(self, notice: MessageParked) -> None:
        message = OutboxMessage.to(self._topology.decider_route(notice.execution_id), notice)
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
