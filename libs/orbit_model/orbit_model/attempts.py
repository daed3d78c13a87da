"""What a call unit's attempt does next: dispatch, redeliver, retry or fail.

A call unit (a task, an http step, a child workflow, a compensation) is
dispatched when scheduled, dispatched again with the same attempt when its
worker was lost (a redelivery), retried after its backoff by its retry
policy, or failed for good; an attempt that outlived its step timeout fails.
Each delivery's token is derived from the state (``EXECUTION:UNIT:N``, with a MAC under
the execution's delivery secret: :func:`delivery_token`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from orbit_model.events import (
    Event,
    RetryScheduled,
    StepAttemptFailed,
    StepDispatched,
    StepFailed,
    TaskFailure,
)
from orbit_model.ir import TaskCall
from orbit_model.outcome_codes import OutcomeCode
from orbit_model.state import ExecutionState, UnitState, UnitStatus
from orbit_model.steps import failure


def next_attempt_event(
    state: ExecutionState, key: str, call: TaskCall, unit: UnitState, now: int
) -> Event | None:
    """The event that moves the call unit ``key`` on now, or None if it waits."""
    status = unit.status
    if status is UnitStatus.SCHEDULED:
        return dispatch(state, key, call, unit, now, attempt=1)
    if status is UnitStatus.UNCERTAIN:
        return dispatch(state, key, call, unit, now, attempt=unit.attempt, redelivery=True)
    if status is UnitStatus.RETRY_WAIT and unit.timer_fired:
        return dispatch(state, key, call, unit, now, attempt=unit.attempt + 1)
    if status is UnitStatus.DISPATCHED and unit.token is None and unit.error is not None:
        return after_failed_attempt(key, call, unit, unit.error, now)
    if (
        status is UnitStatus.DISPATCHED
        and unit.token is not None
        and unit.timed_out_token == unit.token
    ):
        limit = call.timeouts.attempt_ms or 0
        return StepAttemptFailed(
            unit=key,
            attempt=unit.attempt,
            error=failure(
                OutcomeCode.TIMEOUT, f"no result within the step timeout of {limit} ms", True
            ),
        )
    return None


def delivery_token(state: ExecutionState, key: str, number: int) -> str:
    """The token of delivery ``number`` of unit ``key``: ``EXECUTION:UNIT:N``, and, for an
    execution with a delivery secret, ``.MAC``: an HMAC of that under the secret.

    Only the worker the task was handed to learns the token, and a result is applied
    only under a token the execution issued, so nobody else can answer for the task:
    without the secret the MAC cannot be guessed.
    """
    token = f"{state.execution_id}:{key}:{number}"
    if state.delivery_secret is None:
        return token
    mac = hmac.new(state.delivery_secret.encode(), token.encode(), hashlib.sha256).digest()
    return f"{token}.{base64.urlsafe_b64encode(mac[:16]).rstrip(b'=').decode()}"


def child_secret(parent_token: str) -> str | None:
    """The delivery secret of a child, from the (secret) token of the parent step that
    starts it: the same on every decider, and known to no one who lacks the token. None
    when the parent's tokens carry no MAC (it has no secret either)."""
    if "." not in parent_token.rpartition(":")[2]:
        return None
    digest = hashlib.sha256(f"orbit-child-secret:{parent_token}".encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def dispatch(
    state: ExecutionState,
    key: str,
    call: TaskCall,
    unit: UnitState,
    now: int,
    *,
    attempt: int,
    redelivery: bool = False,
) -> StepDispatched:
    """A new delivery of ``key`` with its deadlines, from ``now``."""
    timeouts = call.timeouts
    heartbeat = timeouts.heartbeat_ms
    return StepDispatched(
        unit=key,
        attempt=attempt,
        token=delivery_token(state, key, len(unit.tokens) + 1),
        redelivery=redelivery,
        timeout_at=now + timeouts.attempt_ms if timeouts.attempt_ms else None,
        schedule_deadline_at=now + timeouts.schedule_ms if timeouts.schedule_ms else None,
        heartbeat_timeout_ms=heartbeat,
        heartbeat_check_at=now + heartbeat if heartbeat else None,
    )


def after_failed_attempt(
    key: str, call: TaskCall, unit: UnitState, error: TaskFailure, now: int
) -> Event:
    """A retry after the policy's backoff, or the step's failure when none is left."""
    policy = call.retry
    # A code anywhere in the chain counts: a child's CHILD_FAILED caused by a task's
    # CARD_DECLINED is not retried when the policy names CARD_DECLINED.
    codes = {cause.code for cause in error.chain()}
    if (
        error.retryable
        and not codes.intersection(policy.non_retryable)
        and unit.attempt < policy.max_attempts
    ):
        return RetryScheduled(
            unit=key, next_attempt=unit.attempt + 1, due_at=now + policy.delay_ms(unit.attempt)
        )
    return StepFailed(unit=key, error=error)
