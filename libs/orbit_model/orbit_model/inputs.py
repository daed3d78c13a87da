"""What the world tells an execution, turned into events.

The services call these when something arrives for an execution (a start,
a task result, a signal, a cancel, a timer firing, a lost worker); each
checks the input against the state and the definition and returns the events
to append, or raises an :class:`OrbitError` whose code a client sees. After
appending, the caller runs :func:`orbit_model.decider.decide_until_stable`.
"""

from __future__ import annotations

from typing import Any

from orbit_model.broker_roles import Role, Sender, covers
from orbit_model.contracts import contract_for
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.events import (
    AttemptAlive,
    CancelRequested,
    Event,
    SignalReceived,
    StaleResultIgnored,
    StepAttemptFailed,
    StepAttemptUncertain,
    StepSucceeded,
    TaskFailure,
    TimerFired,
    WorkflowCreated,
)
from orbit_model.ir import WORKFLOW_TASK_PREFIX, CallStep, Step, WorkflowIR
from orbit_model.names import REQUEST_ID, REQUEST_ID_RULE, RESERVED_TASK_PREFIX
from orbit_model.outcome_codes import OutcomeCode
from orbit_model.state import ExecutionState, UnitStatus
from orbit_model.steps import unit_call
from orbit_model.timer_keys import TimerKey, TimerKind
from orbit_model.units import parse_unit


def start_execution(
    definition: WorkflowIR,
    definition_hash: str,
    execution_id: str,
    input: Any = None,
    *,
    parent: str | None = None,
    parent_execution_id: str | None = None,
    parent_token: str | None = None,
    root_execution_id: str | None = None,
    delivery_secret: str | None = None,
    fan_out_budget: int | None = None,
) -> WorkflowCreated:
    """The first event of a new execution, its input checked and defaults applied;
    ``delivery_secret``: the key of its delivery tokens, drawn by the caller;
    ``fan_out_budget``: a child's share of its parent's (:mod:`orbit_model.fan_out`).

    Raises:
        OrbitError: ``INVALID_INPUT`` naming the JSON path of each bad value.
    """
    value = input if input is not None else ({} if definition.input_schema is not None else None)
    if definition.input_schema is not None:
        value = contract_for(definition.input_schema).apply(value, "the execution input")
    return WorkflowCreated(
        execution_id=execution_id,
        workflow=definition.name,
        version=definition.version,
        definition_hash=definition_hash,
        input=value,
        parent=parent,
        parent_execution_id=parent_execution_id,
        parent_token=parent_token,
        root_execution_id=root_execution_id,
        delivery_secret=delivery_secret,
        fan_out_budget=fan_out_budget,
    )


FORGED_TOKEN_SHOWN = 200
"""How much of a token no delivery carried is kept in its StaleResultIgnored."""


def accept_result(
    state: ExecutionState,
    definition: WorkflowIR,
    token: str,
    output: Any = None,
    error: TaskFailure | None = None,
    *,
    worker_id: str | None = None,
    fan_out_used: int | None = None,
) -> list[Event]:
    """Record a worker's result for the delivery ``token`` (from ``worker_id``, if known);
    a child's says what its tree used of its fan-out (``fan_out_used``).

    A success is accepted from any delivery of a unit not yet resolved (the
    work really happened); a failure only from the delivery in flight. An
    output that breaks the task's contract fails the attempt with
    ``OUTPUT_CONTRACT_VIOLATION``. Anything else is recorded as stale, also
    once the execution has ended.
    """
    key = state.unit_of_token(token)
    if key is None:
        return _never_issued(state, token)
    if state.terminal:
        # Nothing can change any more, but a late run (a zombie worker's) is worth a record.
        return [StaleResultIgnored(unit=key, token=token, reason=f"the execution {state.status}")]
    unit = state.unit(key)
    attempt = unit.tokens[token]

    def stale(reason: str) -> list[Event]:
        # A child given up on that answers at last gives back what its tree did not use.
        return [StaleResultIgnored(unit=key, token=token, reason=reason, fan_out_used=fan_out_used)]

    if unit.status.resolved:
        return stale("the unit is already resolved")
    in_flight = token == unit.token
    if error is None:
        output, error = _checked_output(definition, key, output)
        if error is None:
            return [
                StepSucceeded(
                    unit=key,
                    output=output,
                    attempt=attempt,
                    worker_id=worker_id,
                    fan_out_used=fan_out_used,
                )
            ]
        if not in_flight:
            return stale("a broken output of a delivery no longer in flight")
    if not in_flight:
        return stale("a failure of a delivery that is no longer in flight")
    return [
        StepAttemptFailed(
            unit=key, attempt=attempt, error=error, worker_id=worker_id, fan_out_used=fan_out_used
        )
    ]


def _checked_output(
    definition: WorkflowIR, key: str, output: Any
) -> tuple[Any, TaskFailure | None]:
    """``output`` as the task's output contract makes it (its defaults applied), or the
    ``OUTPUT_CONTRACT_VIOLATION`` it is."""
    contract = _output_contract(definition, key)
    if contract is None:
        return output, None
    try:
        return contract_for(contract).apply(output, "the task output"), None
    except OrbitError as violation:
        code = OutcomeCode.OUTPUT_CONTRACT_VIOLATION.value
        return output, TaskFailure(code=code, message=violation.message, retryable=False)


def _never_issued(state: ExecutionState, token: str) -> list[Event]:
    """A result for a token the execution never issued: forged, or guessed (its MAC is
    not one the execution made). Recorded, so that the attempt shows in the history,
    and never applied; nothing at all when there is no such execution."""
    if state.last_seq == 0:
        return []
    shown = token[:FORGED_TOKEN_SHOWN]
    claimed = shown.removeprefix(f"{state.execution_id}:").rpartition(":")[0]
    reason = "a token this execution never issued"
    return [StaleResultIgnored(unit=claimed, token=shown, reason=reason)]


def answer_refusal(sender: Sender, task: str) -> str | None:
    """Why a result for a unit that calls ``task`` is not taken from ``sender``; None: it is.

    Only a user that could have been handed the unit's delivery may answer it, as
    RabbitMQ's permissions say who can read its task queue: a child workflow's outcome
    comes from the services' outbox relays (decider, gateway), a built-in task's result
    from the HTTP adapter, and any other task's from a worker user whose ``--tasks``
    patterns cover it. A worker user whose patterns were not recorded (made by ``orbit
    dev``, or by hand) may answer any task a worker may serve: only its permissions,
    unknown here, tell which.
    """
    role = sender.role
    if task.startswith(WORKFLOW_TASK_PREFIX):
        if role in (Role.DECIDER, Role.GATEWAY):
            return None
        return f"RabbitMQ user {sender.user!r} may not answer a child workflow: only Orbit does"
    if task.startswith(RESERVED_TASK_PREFIX):
        if role is Role.HTTP_ADAPTER:
            return None
        return f"RabbitMQ user {sender.user!r} may not answer the built-in task {task!r}"
    if role is not Role.WORKER:
        return f"RabbitMQ user {sender.user!r}, no worker's, may not answer task {task!r}"
    if sender.tasks is None or covers(sender.tasks, task):
        return None
    patterns = ", ".join(sender.tasks)
    return (
        f"RabbitMQ user {sender.user!r} serves only the tasks of its patterns ({patterns}),"
        f" which do not cover {task!r}: it cannot have been handed this delivery"
    )


def check_sender(
    state: ExecutionState, definition: WorkflowIR, token: str, sender: Sender | None
) -> None:
    """Refuse a result (or a report of a parked one) for delivery ``token`` from a
    ``sender`` that may not answer its unit's task; None (unchecked, with one RabbitMQ
    user for all) passes, and so does a token the execution does not know
    (:func:`accept_result` records what that is).

    Raises:
        OrbitError: ``PERMISSION_DENIED``, saying who sent it and why not.
    """
    if sender is None:
        return
    key = state.unit_of_token(token)
    if key is None:
        return
    try:
        _, call = unit_call(definition, key)
    except (KeyError, StopIteration):
        return
    refusal = answer_refusal(sender, call.task)
    if refusal is not None:
        raise OrbitError(ErrorCode.PERMISSION_DENIED, f"a result for {key}: {refusal}")


def _output_contract(definition: WorkflowIR, key: str) -> Any:
    parsed = parse_unit(key)
    step: Step
    if parsed.role == "finally":
        step = next(s for s in definition.finally_steps if s.id == parsed.step)
    else:
        step = definition.step(parsed.step)
    if not isinstance(step, CallStep):
        return None
    call = step.compensate.call if parsed.role == "compensate" and step.compensate else step.call
    contract = definition.tasks.get(call.task)
    return contract.output_schema if contract is not None else None


def accept_signal(
    state: ExecutionState,
    definition: WorkflowIR,
    name: str,
    payload: Any = None,
    request_id: str | None = None,
) -> list[Event]:
    """Buffer a signal, its payload checked against its schema (defaults applied).

    A signal whose ``request_id`` was recorded before adds nothing, even once
    the execution has ended: it is the same signal sent again
    (:func:`signal_seq` tells where the first one is).

    Raises:
        OrbitError: ``INVALID_REQUEST`` (a malformed ``request_id``),
            ``EXECUTION_FINISHED``, ``UNKNOWN_SIGNAL`` or ``SIGNAL_PAYLOAD_INVALID``.
    """
    if request_id is not None:
        if not REQUEST_ID.fullmatch(request_id):
            raise OrbitError(ErrorCode.INVALID_REQUEST, f"{request_id!r}: {REQUEST_ID_RULE}")
        if signal_seq(state, request_id) is not None:
            return []
    _must_be_running(state)
    if name not in definition.signals:
        known = ", ".join(sorted(definition.signals)) or "none"
        raise OrbitError(
            ErrorCode.UNKNOWN_SIGNAL, f"{definition.name} has no signal {name!r} (it has: {known})"
        )
    schema = definition.signals[name]
    if schema is not None:
        try:
            payload = contract_for(schema).apply(payload, f"the payload of signal {name!r}")
        except OrbitError as error:
            raise OrbitError(ErrorCode.SIGNAL_PAYLOAD_INVALID, error.message) from None
    return [SignalReceived(name=name, payload=payload, request_id=request_id)]


def signal_seq(state: ExecutionState, request_id: str) -> int | None:
    """The seq at which the signal with ``request_id`` was recorded; None if it was not."""
    seq: int | None = state.index.requests.get(request_id)
    return seq


def accept_cancel(state: ExecutionState, reason: str = "") -> list[Event]:
    """Ask the execution to stop; a second request adds nothing.

    Raises:
        OrbitError: ``EXECUTION_FINISHED``.
    """
    _must_be_running(state)
    if state.cancel_reason is not None or state.abort is not None:
        return []
    return [CancelRequested(reason=reason)]


def accept_timer(state: ExecutionState, key: str, now: int) -> list[Event]:
    """Fire a timer that is still wanted and due; a late or repeated firing adds nothing,
    and neither does a liveness deadline (:func:`accept_liveness_check` judges those)."""
    due = state.timers.get(key)  # a key the state wants is well formed
    if due is None or due > now or TimerKey.parse(key).kind.is_liveness:
        return []
    return [TimerFired(key=key)]


def accept_lost_delivery(state: ExecutionState, token: str, reason: str) -> list[Event]:
    """The worker holding delivery ``token`` is gone: its attempt becomes uncertain."""
    key = state.unit_of_token(token)
    if key is None or state.terminal:
        return []
    unit = state.unit(key)
    if unit.status is not UnitStatus.DISPATCHED or unit.token != token:
        return []
    return [StepAttemptUncertain(unit=key, token=token, reason=reason)]


def accept_attempt_timeout(state: ExecutionState, token: str, code: OutcomeCode) -> list[Event]:
    """A queue or heartbeat deadline of delivery ``token`` passed (seen by the dispatcher)."""
    key = state.unit_of_token(token)
    if key is None or state.terminal:
        return []
    unit = state.unit(key)
    if unit.status is not UnitStatus.DISPATCHED or unit.token != token:
        return []
    what = "in the queue" if code is OutcomeCode.SCHEDULE_TIMEOUT else "without a heartbeat"
    error = TaskFailure(code=code.value, message=f"the attempt waited too long {what}")
    return [StepAttemptFailed(unit=key, attempt=unit.attempt, error=error)]


def accept_liveness_check(
    state: ExecutionState, key: str, now: int, heartbeat_at: int | None
) -> list[Event]:
    """A schedule or heartbeat deadline of a delivery came: is the attempt alive?

    Args:
        state: The execution.
        key: ``schedule:TOKEN`` or ``heartbeat:TOKEN``.
        now: Epoch ms.
        heartbeat_at: None if no worker holds the delivery; else when the task
            last heartbeated (or started), as its worker reports it.

    A delivery no worker took by its schedule deadline fails its attempt with
    ``SCHEDULE_TIMEOUT``; one held but silent for longer than its heartbeat
    timeout fails it with ``HEARTBEAT_TIMEOUT``. Otherwise the deadline moves
    on (:class:`AttemptAlive`). A deadline not yet due, or no longer wanted,
    adds nothing.
    """
    due = state.timers.get(key)  # a key the state wants is well formed
    if due is None or due > now:
        return []
    timer = TimerKey.parse(key)
    if not timer.kind.is_liveness:
        return []
    token = timer.subject
    unit_key = state.unit_of_token(token)
    if unit_key is None:
        return []
    unit = state.unit(unit_key)
    held = heartbeat_at is not None
    if timer.kind is TimerKind.SCHEDULE:
        if not held:
            return accept_attempt_timeout(state, token, OutcomeCode.SCHEDULE_TIMEOUT)
        return [
            AttemptAlive(
                unit=unit_key, token=token, started=True, heartbeat_check_at=unit.heartbeat_check_at
            )
        ]
    interval = unit.heartbeat_timeout_ms or 0
    if heartbeat_at is None:
        # Still queued: waiting for a worker is the schedule deadline's business.
        return [
            AttemptAlive(
                unit=unit_key, token=token, started=False, heartbeat_check_at=now + interval
            )
        ]
    if heartbeat_at + interval > now:
        return [
            AttemptAlive(
                unit=unit_key,
                token=token,
                started=True,
                heartbeat_check_at=heartbeat_at + interval,
            )
        ]
    return accept_attempt_timeout(state, token, OutcomeCode.HEARTBEAT_TIMEOUT)


def _must_be_running(state: ExecutionState) -> None:
    if state.terminal:
        raise OrbitError(
            ErrorCode.EXECUTION_FINISHED, f"execution {state.execution_id} is {state.status}"
        )
