"""Parked messages: which execution must hear of one, and what it records.

RabbitMQ dead-letters a message to ``NS.dead-letter`` when its queue's
delivery limit is reached (reason ``delivery_limit``: a poison task whose
worker crashes on it) or when its consumer rejects it (``rejected``: it does
not decode, or it failed at its 5th delivery). Every queue but the
dead-letter queues themselves does so. A parked message is lost to its
execution unless someone says so: the dispatcher reads a copy of each from
``NS.dead-letter.reports``, turns it into a :class:`MessageParked` for the
execution it concerns (:func:`notice_for`) and sends that to the decider,
which fails the attempt the message was about or records the loss
(:func:`accept_parked`). A parked message changes an execution only if its
sender (its AMQP ``user_id``, which RabbitMQ keeps as it parks it) could have
sent the original (:func:`may_report`); the decider holds a parked result's
sender to the task, as it holds a result's.

The body is read as loosely as possible: a message is often parked *because*
it does not decode, and its execution id and token are still worth finding.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orbit_model.broker_roles import SENDERS, Role, sender_refusal
from orbit_model.events import Event, MessageLost, StepAttemptFailed, TaskFailure
from orbit_model.messages import DeciderInput, MessageParked, TaskResult
from orbit_model.outcome_codes import OutcomeCode
from orbit_model.state import ExecutionState, UnitStatus
from orbit_model.topology import DELIVERY_LIMIT, Topology

DELIVERY_LIMIT_REASON = "delivery_limit"
"""RabbitMQ's ``x-death`` reason for a message delivered more often than its queue allows."""


@dataclass(frozen=True)
class Death:
    """Where and why RabbitMQ parked a message: the newest entry of its ``x-death`` header."""

    queue: str
    reason: str


def death_of(headers: Mapping[str, Any] | None) -> Death | None:
    """The newest ``x-death`` entry of a parked message; None if it has none (not parked)."""
    deaths = (headers or {}).get("x-death")
    if not isinstance(deaths, list | tuple) or not deaths or not isinstance(deaths[0], Mapping):
        return None
    newest = deaths[0]
    return Death(queue=_text(newest.get("queue")), reason=_text(newest.get("reason")))


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else ""


def _field(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    return value if isinstance(value, str) and value else None


def notice_for(body: bytes, death: Death, *, task_queue: bool) -> MessageParked | None:
    """The notice telling an execution that ``body`` was parked; None if none waits on it.

    Args:
        body: The parked message.
        death: Where and why it was parked.
        task_queue: Whether it was parked by a task queue, where the ``type`` of
            an assignment may be left out.

    Nobody is told of a parked start (no execution exists yet), of a notice
    that was itself parked (that would loop), or of a body naming no execution.
    """
    try:
        decoded = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(decoded, dict):
        return None
    message_type = _field(decoded, "type") or ("TaskAssignment" if task_queue else None)
    if message_type is None or message_type in ("StartExecution", "MessageParked"):
        return None
    execution_id, token = _field(decoded, "execution_id"), _field(decoded, "token")
    detail = ""
    if message_type == "StartChild":
        # The parent waits on its child's start: tell the parent, about its delivery.
        execution_id = _field(decoded, "parent_execution_id")
        token = _field(decoded, "parent_token")
    elif message_type == "SignalExecution":
        detail = f"signal {_field(decoded, 'name') or '?'}"
    elif message_type == "TimerDue":
        detail = f"timer {_field(decoded, 'key') or '?'}"
    if execution_id is None:
        return None
    limit = death.reason == DELIVERY_LIMIT_REASON
    return MessageParked(
        execution_id=execution_id,
        message_type=message_type,
        token=token,
        queue=death.queue,
        reason=death.reason,
        delivery_count=DELIVERY_LIMIT + 1 if limit else None,
        worker_id=_field(decoded, "worker_id") if message_type == "TaskResult" else None,
        detail=detail,
    )


_ASSIGNERS = frozenset(SENDERS["decider"]["StartChild"])
"""Who publishes a task assignment: the decider, and the outbox relays (the gateway's
sweeps what a decider left behind), as they publish a child's start."""


def may_report(topology: Topology, death: Death, message_type: str, sender: Role | None) -> bool:
    """Whether a message of ``message_type`` from a user of role ``sender`` (None: no Orbit
    user), parked by ``death.queue``, may change an execution: only if that user could have
    sent such a message there, as the queue's consumer takes that kind only from some
    roles (:data:`~orbit_model.broker_roles.SENDERS`; an assignment, in a task queue, only
    from the services that dispatch). A kind the queue's consumer never takes (a result
    sent to ``NS.commands``) concerns nothing; nor does a message from no Orbit user.
    """
    queue = death.queue
    if queue.startswith(topology.task_queue("", "")[:-1]):
        return message_type == "TaskAssignment" and sender in _ASSIGNERS
    if queue == topology.commands:
        consumer = "gateway"
    elif queue == topology.control:
        consumer = "dispatcher"
    elif queue.startswith(f"{topology.decider}."):
        consumer = "decider"
    else:
        return False
    return sender is not None and sender_refusal(consumer, message_type, sender) is None


def speaker(item: DeciderInput, user: str | None) -> str | None:
    """Whose word a decider input sent by the RabbitMQ ``user`` carries about a result
    (:attr:`orbit_model.plan.Facts.senders`): a ``TaskResult``'s sender's, and for a
    report of a parked result the sender of that result; None for any other input."""
    if isinstance(item, MessageParked):
        return item.sender if item.message_type == "TaskResult" else None
    return user if isinstance(item, TaskResult) else None


def accept_parked(state: ExecutionState, notice: MessageParked) -> list[Event]:
    """What an execution records of a parked message.

    One about the delivery in flight fails that attempt, with
    ``DELIVERY_LIMIT_EXCEEDED`` when RabbitMQ gave up delivering it and
    ``MESSAGE_PARKED`` when a consumer parked it; both are retryable, so the
    step's retry policy decides what comes next. One about an older delivery
    changes nothing (nothing waits on it). One about no delivery (a signal, a
    timer's firing) is recorded as :class:`MessageLost`. A finished execution
    records nothing.
    """
    if state.terminal or state.last_seq == 0:
        return []
    if notice.token is None:
        lost = MessageLost(
            message_type=notice.message_type,
            queue=notice.queue,
            reason=notice.reason,
            detail=notice.detail,
        )
        return [lost]
    key = state.unit_of_token(notice.token)
    if key is None:
        return []
    unit = state.unit(key)
    if unit.status is not UnitStatus.DISPATCHED or unit.token != notice.token:
        return []
    error = parked_failure(notice)
    return [
        StepAttemptFailed(unit=key, attempt=unit.attempt, error=error, worker_id=notice.worker_id)
    ]


def parked_failure(notice: MessageParked) -> TaskFailure:
    """The failure of an attempt whose message was parked, saying how often it was
    delivered and who held it last."""
    held = f"; the last worker holding it was {notice.worker_id}" if notice.worker_id else ""
    details = {
        "message_type": notice.message_type,
        "queue": notice.queue,
        "reason": notice.reason,
        "delivery_count": notice.delivery_count,
        "worker_id": notice.worker_id,
    }
    if notice.reason == DELIVERY_LIMIT_REASON:
        message = (
            f"the task message was delivered {notice.delivery_count} times without being"
            f" acknowledged (a worker may crash on it){held}; RabbitMQ parked it"
        )
        code = OutcomeCode.DELIVERY_LIMIT_EXCEEDED
    else:
        what = "the worker's result" if notice.message_type == "TaskResult" else "the message"
        message = (
            f"{what} ({notice.message_type}) was parked by {notice.queue or 'its queue'}"
            f" ({notice.reason or 'no reason given'}): it did not decode or kept failing{held}"
        )
        code = OutcomeCode.MESSAGE_PARKED
    return TaskFailure(code=code.value, message=message, retryable=True, details=details)
