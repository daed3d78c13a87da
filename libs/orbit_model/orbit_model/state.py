"""An execution's state, folded from its events: ``evolve`` and ``replay``.

The fold makes no decisions: it records what each event says. Anything that
needs the definition or the clock is :mod:`orbit_model.decider`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from orbit_model.events import (
    AbortCause,
    AttemptAlive,
    CancelRequested,
    CompensationOutcome,
    CompensationStarted,
    Event,
    LimitExceeded,
    MessageLost,
    ParentReattached,
    RetryScheduled,
    SignalReceived,
    StaleResultIgnored,
    StepAttemptFailed,
    StepAttemptUncertain,
    StepCancelled,
    StepDispatched,
    StepFailed,
    StepFanOut,
    StepScheduled,
    StepSkipped,
    StepSucceeded,
    TaskFailure,
    TimerFired,
    TimerStarted,
    WorkflowCancelled,
    WorkflowCompleted,
    WorkflowCreated,
    WorkflowFailed,
    WorkflowStarted,
    WorkflowTimedOut,
)

ExecutionStatus = Literal[
    "new", "created", "running", "completed", "failed", "cancelled", "timed_out"
]
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled", "timed_out"})
WORKFLOW_TIMER = "workflow"


class UnitStatus(StrEnum):
    """Where a unit is. A unit absent from the state is pending."""

    PENDING = "pending"
    SCHEDULED = "scheduled"
    DISPATCHED = "dispatched"
    UNCERTAIN = "uncertain"
    RETRY_WAIT = "retry_wait"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"

    @property
    def resolved(self) -> bool:
        """Whether the unit's outcome is final."""
        return self in _RESOLVED


_RESOLVED = frozenset(
    {UnitStatus.SUCCEEDED, UnitStatus.FAILED, UnitStatus.SKIPPED, UnitStatus.CANCELLED}
)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class UnitState(_Frozen):
    """One unit: a step, a ``for`` element, a compensation or a cleanup step."""

    status: UnitStatus = UnitStatus.PENDING
    input: JsonValue = None
    attempt: int = 0
    """The attempt now (or last) in flight; 0 before the first dispatch."""
    token: str | None = None
    """The delivery in flight, if any."""
    tokens: dict[str, int] = Field(default_factory=dict)
    """Every delivery ever issued for this unit, with its attempt number."""
    output: JsonValue = None
    error: TaskFailure | None = None
    due_at: int | None = None
    """When the pending timer of this unit is due: its retry, sleep or await timeout."""
    timeout_at: int | None = None
    """When the attempt in flight times out."""
    timer_fired: bool = False
    """The unit's retry, sleep or await timer fired and is not yet acted on."""
    timed_out_token: str | None = None
    """The delivery whose attempt timeout fired and is not yet acted on."""
    schedule_deadline_at: int | None = None
    """When the delivery in flight must have been taken by a worker, until one has."""
    heartbeat_timeout_ms: int | None = None
    heartbeat_check_at: int | None = None
    """When to look next at the heartbeats of the delivery in flight."""
    items: tuple[JsonValue, ...] | None = None
    """For a ``for`` step's own record: the elements it fans out to."""
    resolved_seq: int | None = None
    """The sequence number of the event that resolved the unit (compensation runs newest first)."""


class BufferedSignal(_Frozen):
    name: str
    payload: JsonValue = None
    taken_by: str | None = None
    """The ``await`` unit that took it."""
    seq: int = 0
    """The seq of its ``SignalReceived``."""
    request_id: str | None = None


class LostMessage(_Frozen):
    """A message for the execution that a queue parked (see :class:`.events.MessageLost`)."""

    message_type: str
    queue: str
    reason: str
    detail: str = ""


class Abort(_Frozen):
    cause: AbortCause
    error: TaskFailure | None = None


class ExecutionState(_Frozen):
    """Everything known of an execution, as of event ``last_seq``."""

    execution_id: str = ""
    workflow: str = ""
    version: str = ""
    definition_hash: str = ""
    parent: str | None = None
    parent_execution_id: str | None = None
    parent_token: str | None = None
    root_execution_id: str | None = None
    """For a child: the top-level execution it descends from; see :attr:`trace_root`."""
    delivery_secret: str | None = Field(default=None, exclude=True, repr=False)
    """The key of its delivery tokens (from ``WorkflowCreated``); never dumped or shown."""
    status: ExecutionStatus = "new"
    input: JsonValue = None
    units: dict[str, UnitState] = Field(default_factory=dict)
    signals: tuple[BufferedSignal, ...] = ()
    deadline_at: int | None = None
    deadline_passed: bool = False
    cancel_reason: str | None = None
    abort: Abort | None = None
    """Set once the execution stops: no new work, compensation, cleanup, the end."""
    limit_exceeded: str | None = None
    lost_messages: tuple[LostMessage, ...] = ()
    """Messages for the execution that were parked, so never acted on."""
    output: JsonValue = None
    error: TaskFailure | None = None
    compensation: CompensationOutcome = "none"
    last_seq: int = 0

    @property
    def trace_root(self) -> str:
        """The top-level execution whose trace this one belongs to (itself when top-level)."""
        return self.root_execution_id or self.execution_id

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def unit(self, key: str) -> UnitState:
        """The unit's state; a unit never touched is pending."""
        return self.units.get(key, _PENDING)

    def idempotency_key(self, unit: str) -> str:
        """Stable across retries and redeliveries of the unit: ``EXECUTION_ID:UNIT``."""
        return f"{self.execution_id}:{unit}"

    @property
    def timers(self) -> dict[str, int]:
        """Every timer the execution waits on, by key, with its due time.

        Keys: ``workflow`` (the workflow timeout), ``retry:UNIT`` (a retry's
        backoff), ``timer:UNIT`` (a sleep, or an await's timeout) and
        ``timeout:TOKEN`` (an attempt's timeout). A timer service keeps its table equal to this.
        """
        if self.terminal:
            return {}
        timers: dict[str, int] = {}
        if self.deadline_at is not None and not self.deadline_passed and self.abort is None:
            timers[WORKFLOW_TIMER] = self.deadline_at
        for key, unit in self.units.items():
            if unit.due_at is not None and not unit.timer_fired and not unit.status.resolved:
                kind = "retry" if unit.status is UnitStatus.RETRY_WAIT else "timer"
                timers[f"{kind}:{key}"] = unit.due_at
            if (
                unit.status is UnitStatus.DISPATCHED
                and unit.timeout_at is not None
                and unit.token is not None
                and unit.timed_out_token != unit.token
            ):
                timers[f"timeout:{unit.token}"] = unit.timeout_at
            if unit.status is UnitStatus.DISPATCHED and unit.token is not None:
                if unit.schedule_deadline_at is not None:
                    timers[f"schedule:{unit.token}"] = unit.schedule_deadline_at
                if unit.heartbeat_check_at is not None:
                    timers[f"heartbeat:{unit.token}"] = unit.heartbeat_check_at
        return timers

    def unit_of_token(self, token: str) -> str | None:
        """The unit a delivery token was issued for."""
        # Tokens are issued as EXECUTION_ID:UNIT:N: look there first, in O(1).
        prefix = f"{self.execution_id}:"
        if token.startswith(prefix):
            key = token[len(prefix) :].rpartition(":")[0]
            unit = self.units.get(key)
            if unit is not None and token in unit.tokens:
                return key
        for key, unit in self.units.items():
            if token in unit.tokens:
                return key
        return None


_PENDING = UnitState()


def replay(events: Iterable[Event]) -> ExecutionState:
    """The state after ``events``, from the first."""
    state = ExecutionState()
    for event in events:
        state = evolve(state, event)
    return state


def evolve(state: ExecutionState, event: Event) -> ExecutionState:
    """The state after one more event. Never raises for an event ``decide`` emits."""
    changes = _changes(state, event)
    changes["last_seq"] = state.last_seq + 1
    return state.model_copy(update=changes)


def _with_unit(state: ExecutionState, key: str, **changes: Any) -> dict[str, Any]:
    units = dict(state.units)
    units[key] = state.unit(key).model_copy(update=changes)
    return {"units": units}


# Long on purpose: the fold is one case per event type, and reads best as one match.
def _changes(state: ExecutionState, event: Event) -> dict[str, Any]:
    match event:
        case WorkflowCreated():
            return {
                "execution_id": event.execution_id,
                "workflow": event.workflow,
                "version": event.version,
                "definition_hash": event.definition_hash,
                "input": event.input,
                "parent": event.parent,
                "parent_execution_id": event.parent_execution_id,
                "parent_token": event.parent_token,
                "root_execution_id": event.root_execution_id,
                "delivery_secret": event.delivery_secret,
                "status": "created",
            }
        case WorkflowStarted():
            return {"status": "running", "deadline_at": event.deadline_at}
        case StepScheduled():
            return _with_unit(state, event.unit, status=UnitStatus.SCHEDULED, input=event.input)
        case StepFanOut():
            return _with_unit(
                state, event.unit, status=UnitStatus.SCHEDULED, items=tuple(event.items)
            )
        case StepDispatched():
            unit = state.unit(event.unit)
            return _with_unit(
                state,
                event.unit,
                status=UnitStatus.DISPATCHED,
                attempt=event.attempt,
                token=event.token,
                tokens={**unit.tokens, event.token: event.attempt},
                due_at=None,
                timer_fired=False,
                timeout_at=event.timeout_at,
                schedule_deadline_at=event.schedule_deadline_at,
                heartbeat_timeout_ms=event.heartbeat_timeout_ms,
                heartbeat_check_at=event.heartbeat_check_at,
            )
        case ParentReattached():
            return {"parent_token": event.parent_token}
        case AttemptAlive():
            unit = state.unit(event.unit)
            if unit.token != event.token:
                return {}
            return _with_unit(
                state,
                event.unit,
                schedule_deadline_at=None if event.started else unit.schedule_deadline_at,
                heartbeat_check_at=event.heartbeat_check_at,
            )
        case StepSucceeded():
            changes = _with_unit(
                state,
                event.unit,
                status=UnitStatus.SUCCEEDED,
                resolved_seq=state.last_seq + 1,
                output=event.output,
                token=None,
                due_at=None,
                timer_fired=False,
                timeout_at=None,
            )
            if event.signal is not None:
                signals = list(state.signals)
                signals[event.signal] = signals[event.signal].model_copy(
                    update={"taken_by": event.unit}
                )
                changes["signals"] = tuple(signals)
            return changes
        case StepAttemptFailed():
            return _with_unit(state, event.unit, error=event.error, token=None, timeout_at=None)
        case StepAttemptUncertain():
            return _with_unit(
                state, event.unit, status=UnitStatus.UNCERTAIN, token=None, timeout_at=None
            )
        case RetryScheduled():
            return _with_unit(
                state,
                event.unit,
                status=UnitStatus.RETRY_WAIT,
                attempt=event.next_attempt - 1,
                due_at=event.due_at,
                timer_fired=False,
            )
        case StepFailed():
            return _with_unit(
                state,
                event.unit,
                status=UnitStatus.FAILED,
                error=event.error,
                token=None,
                due_at=None,
                timer_fired=False,
                timeout_at=None,
            )
        case StepSkipped():
            return _with_unit(state, event.unit, status=UnitStatus.SKIPPED)
        case StepCancelled():
            return _with_unit(
                state,
                event.unit,
                status=UnitStatus.CANCELLED,
                token=None,
                due_at=None,
                timer_fired=False,
                timeout_at=None,
            )
        case TimerStarted():
            return _with_unit(state, event.unit, due_at=event.due_at, timer_fired=False)
        case TimerFired():
            return _fire(state, event.key)
        case SignalReceived():
            signal = BufferedSignal(
                name=event.name,
                payload=event.payload,
                seq=state.last_seq + 1,
                request_id=event.request_id,
            )
            return {"signals": (*state.signals, signal)}
        case CancelRequested():
            return {"cancel_reason": event.reason}
        case LimitExceeded():
            return {"limit_exceeded": event.message}
        case StaleResultIgnored():
            return {}
        case MessageLost():
            lost = LostMessage(
                message_type=event.message_type,
                queue=event.queue,
                reason=event.reason,
                detail=event.detail,
            )
            return {"lost_messages": (*state.lost_messages, lost)}
        case CompensationStarted():
            return {"abort": Abort(cause=event.cause, error=event.error)}
        case WorkflowCompleted():
            return {"status": "completed", "output": event.output}
        case WorkflowFailed():
            return {"status": "failed", "error": event.error, "compensation": event.compensation}
        case WorkflowCancelled():
            return {"status": "cancelled", "compensation": event.compensation}
        case WorkflowTimedOut():
            return {"status": "timed_out", "compensation": event.compensation}
    raise TypeError(f"not an event: {event!r}")  # pragma: no cover - the union is closed


def _fire(state: ExecutionState, key: str) -> dict[str, Any]:
    if key == WORKFLOW_TIMER:
        return {"deadline_passed": True}
    kind, _, rest = key.partition(":")
    if kind == "timeout":
        unit = state.unit_of_token(rest)
        return {} if unit is None else _with_unit(state, unit, timed_out_token=rest)
    return _with_unit(state, rest, timer_fired=True)
