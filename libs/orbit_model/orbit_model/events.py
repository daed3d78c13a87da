"""The events of an execution's history: one frozen model per kind, one union.

An execution is nothing but its events. Each names the *unit* it concerns:

- ``charge``: a step with one unit;
- ``ship[3]``: the fourth unit of the ``for`` step ``ship`` (``ship`` itself
  is the step's own record: its fan-out and its combined outcome);
- ``compensate:reserve``: the compensation of step ``reserve``;
- ``finally:unlock``: the cleanup step ``unlock``.

Events carry only what :func:`orbit_model.state.evolve` uses; everything
else (timestamps, the sequence number) belongs to the store's envelope.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
)

CompensationOutcome = Literal["none", "completed", "failed"]
AbortCause = Literal["failed", "cancelled", "timed_out"]


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


_LATER_FIELDS = ("delivery_secret", "fan_out_budget", "fan_out_used")
"""Fields added to events after histories were written without them: left out of an
event's JSON when None, so those histories, and the pure core's tests, keep their form."""


class _Grown(_Event):
    """An event with some of :data:`_LATER_FIELDS`."""

    @model_serializer(mode="wrap")
    def _without_absent_later_fields(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for key in _LATER_FIELDS:
                if key in data and data[key] is None:
                    del data[key]
        return data


class TaskFailure(BaseModel):
    """Why an attempt, a step or an execution failed: an error as a value.

    Unknown fields are ignored, not refused: failures also arrive from workers
    in other languages, whose newer SDKs may send more.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    code: str
    message: str
    retryable: bool = True
    """False when the worker (or Orbit) says trying again cannot help."""
    details: JsonValue = None
    step: str | None = None
    """The unit it happened in (``charge``, ``ship[3]``), once it is the cause of another."""
    execution_id: str | None = None
    """The execution it happened in, once it is the cause of another (or of an execution)."""
    cause: TaskFailure | None = None
    """The error this one wraps: a step's for an execution's failure, a child execution's
    for its parent's step, down to the task's own error with its ``details``."""

    @model_serializer(mode="wrap")
    def _without_an_absent_chain(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Left out when None: an error with no chain keeps the form it always had.
        data = handler(self)
        if isinstance(data, dict):
            for key in _CHAIN_FIELDS:
                if data.get(key) is None:
                    data.pop(key, None)
        return data

    def caused_by(self, unit: str | None = None, execution_id: str | None = None) -> TaskFailure:
        """This error as the cause of another: where it happened filled in, unless known."""
        return self.model_copy(
            update={"step": self.step or unit, "execution_id": self.execution_id or execution_id}
        )

    def as_sent(self) -> TaskFailure:
        """This error as a worker may say it: without ``step`` and ``execution_id`` at any
        level of its chain, which only the engine fills in (:meth:`caused_by`)."""
        cause = None if self.cause is None else self.cause.as_sent()
        return self.model_copy(update={"step": None, "execution_id": None, "cause": cause})

    def chain(self) -> list[TaskFailure]:
        """This error and its causes, outermost first."""
        errors: list[TaskFailure] = []
        error: TaskFailure | None = self
        while error is not None:
            errors.append(error)
            error = error.cause
        return errors


_CHAIN_FIELDS = ("step", "execution_id", "cause")


class WorkflowCreated(_Grown):
    """Seq 1: the execution exists. Its unique key makes starting idempotent."""

    type: Literal["WorkflowCreated"] = "WorkflowCreated"
    execution_id: str
    workflow: str
    version: str
    definition_hash: str
    input: JsonValue = None
    """The input, already checked against the schema, with defaults applied."""
    parent: str | None = None
    """``EXECUTION_ID:UNIT`` of the parent step, for a child workflow."""
    parent_execution_id: str | None = None
    """For a child workflow: the execution its outcome is reported to."""
    parent_token: str | None = None
    """For a child workflow: the delivery token of the parent step it answers."""
    root_execution_id: str | None = None
    """For a child workflow: the top-level execution it descends from (its trace's)."""
    delivery_secret: str | None = None
    """The key of this execution's delivery tokens (:func:`orbit_model.attempts.dispatch`):
    drawn at random when it is created, never shown, so that a result can be sent only
    by whoever received its task. None in executions made before it existed."""
    fan_out_budget: int | None = None
    """For a child workflow: the ``for`` elements its whole tree may fan out, its share of
    its parent's (:mod:`orbit_model.fan_out`). None: a top-level execution, whose budget
    is ``ORBIT_MAX_FAN_OUT`` (or a child started before budgets existed)."""


class ParentReattached(_Event):
    """A child's parent retried the step that started it: answer this delivery now."""

    type: Literal["ParentReattached"] = "ParentReattached"
    parent_token: str


class WorkflowStarted(_Event):
    type: Literal["WorkflowStarted"] = "WorkflowStarted"
    deadline_at: int | None = None
    """Epoch milliseconds of the workflow timeout, if it has one."""


class StepScheduled(_Event):
    """A unit will run: its input is evaluated and fixed."""

    type: Literal["StepScheduled"] = "StepScheduled"
    unit: str
    input: JsonValue = None


class StepFanOut(_Event):
    """A ``for`` step's list was evaluated: it has this many units."""

    type: Literal["StepFanOut"] = "StepFanOut"
    unit: str
    items: list[JsonValue]


class StepDispatched(_Grown):
    """An attempt of a unit is sent to a task queue."""

    type: Literal["StepDispatched"] = "StepDispatched"
    unit: str
    attempt: int
    token: str
    """Names this delivery; a result quotes it."""
    redelivery: bool = False
    """The previous delivery of this attempt was lost; the worker may have run it."""
    timeout_at: int | None = None
    """Epoch ms by which the attempt's result must arrive (step ``timeout``)."""
    schedule_deadline_at: int | None = None
    """Epoch ms by which a worker must have taken it (``schedule_timeout``)."""
    heartbeat_timeout_ms: int | None = None
    """The longest gap allowed between its heartbeats (``heartbeat_timeout``)."""
    heartbeat_check_at: int | None = None
    """Epoch ms of the first look at its heartbeats (dispatch + ``heartbeat_timeout``)."""
    fan_out_budget: int | None = None
    """For a child workflow's unit: the fan-out its child's tree may use, taken from this
    execution's budget until the child answers (None: unbounded, or not a child)."""


class AttemptAlive(_Event):
    """The delivery was seen alive (held by a worker, or still queued) when its
    schedule or heartbeat deadline came; the deadline moves on."""

    type: Literal["AttemptAlive"] = "AttemptAlive"
    unit: str
    token: str
    started: bool
    """A worker holds it: the schedule deadline no longer applies."""
    heartbeat_check_at: int | None = None
    """When to look at its heartbeats next (None: no heartbeat timeout)."""


class StepSucceeded(_Grown):
    type: Literal["StepSucceeded"] = "StepSucceeded"
    unit: str
    output: JsonValue = None
    attempt: int = 0
    signal: int | None = None
    """For an ``await`` unit: the position of the buffered signal it took."""
    worker_id: str | None = None
    """For a task: the worker that returned the output."""
    fan_out_used: int | None = None
    """For a child workflow's unit: what of its budget the child's tree used; the rest
    comes back to this execution's."""


class StepAttemptFailed(_Grown):
    type: Literal["StepAttemptFailed"] = "StepAttemptFailed"
    unit: str
    attempt: int
    error: TaskFailure
    worker_id: str | None = None
    """The worker that reported the failure (None when Orbit failed the attempt)."""
    fan_out_used: int | None = None
    """As :attr:`StepSucceeded.fan_out_used`, for a child that failed."""


class StepAttemptUncertain(_Event):
    """The worker running an attempt was lost: it may or may not have run it."""

    type: Literal["StepAttemptUncertain"] = "StepAttemptUncertain"
    unit: str
    token: str
    reason: str


class RetryScheduled(_Event):
    type: Literal["RetryScheduled"] = "RetryScheduled"
    unit: str
    next_attempt: int
    due_at: int


class StepFailed(_Event):
    """A unit failed for good (its retries spent, or not retryable)."""

    type: Literal["StepFailed"] = "StepFailed"
    unit: str
    error: TaskFailure


class StepSkipped(_Event):
    type: Literal["StepSkipped"] = "StepSkipped"
    unit: str
    reason: str


class StepCancelled(_Event):
    """An unresolved unit was abandoned because the execution is stopping."""

    type: Literal["StepCancelled"] = "StepCancelled"
    unit: str


class TimerStarted(_Event):
    """A ``sleep`` unit's durable timer."""

    type: Literal["TimerStarted"] = "TimerStarted"
    unit: str
    due_at: int


class TimerFired(_Event):
    type: Literal["TimerFired"] = "TimerFired"
    key: str
    """The timer's key, as listed by :attr:`ExecutionState.timers`."""


class SignalReceived(_Event):
    type: Literal["SignalReceived"] = "SignalReceived"
    name: str
    payload: JsonValue = None
    request_id: str | None = None
    """The client's id for it: a signal with an id already recorded adds nothing."""


class CancelRequested(_Event):
    type: Literal["CancelRequested"] = "CancelRequested"
    reason: str = ""


class LimitExceeded(_Event):
    type: Literal["LimitExceeded"] = "LimitExceeded"
    limit: str
    message: str


class StaleResultIgnored(_Grown):
    """A result for a unit that is already resolved, or for a token never issued."""

    type: Literal["StaleResultIgnored"] = "StaleResultIgnored"
    unit: str
    token: str
    reason: str
    fan_out_used: int | None = None
    """For a child given up on that answered at last: what of its budget its tree used;
    the rest comes back to this execution's."""


class MessageLost(_Event):
    """A message for the execution was parked in the dead-letter queue, so what it
    carried (a signal, a timer's firing, a cancel) did not happen: shown in its view."""

    type: Literal["MessageLost"] = "MessageLost"
    message_type: str
    queue: str
    reason: str
    detail: str = ""


class CompensationStarted(_Event):
    """The execution stops: no new work; compensations, then ``finally``, then the end."""

    type: Literal["CompensationStarted"] = "CompensationStarted"
    cause: AbortCause
    error: TaskFailure | None = None


class WorkflowCompleted(_Event):
    type: Literal["WorkflowCompleted"] = "WorkflowCompleted"
    output: JsonValue = None


class WorkflowFailed(_Event):
    type: Literal["WorkflowFailed"] = "WorkflowFailed"
    error: TaskFailure
    compensation: CompensationOutcome = "none"


class WorkflowCancelled(_Event):
    type: Literal["WorkflowCancelled"] = "WorkflowCancelled"
    reason: str = ""
    compensation: CompensationOutcome = "none"


class WorkflowTimedOut(_Event):
    type: Literal["WorkflowTimedOut"] = "WorkflowTimedOut"
    compensation: CompensationOutcome = "none"


Event = Annotated[
    WorkflowCreated
    | WorkflowStarted
    | ParentReattached
    | StepScheduled
    | StepFanOut
    | StepDispatched
    | AttemptAlive
    | StepSucceeded
    | StepAttemptFailed
    | StepAttemptUncertain
    | RetryScheduled
    | StepFailed
    | StepSkipped
    | StepCancelled
    | TimerStarted
    | TimerFired
    | SignalReceived
    | CancelRequested
    | LimitExceeded
    | StaleResultIgnored
    | MessageLost
    | CompensationStarted
    | WorkflowCompleted
    | WorkflowFailed
    | WorkflowCancelled
    | WorkflowTimedOut,
    Field(discriminator="type"),
]

TERMINAL_EVENTS: frozenset[str] = frozenset(
    {"WorkflowCompleted", "WorkflowFailed", "WorkflowCancelled", "WorkflowTimedOut"}
)
"""The types of the events that end an execution (after one, a history only records
what came too late, such as a zombie worker's result)."""

_EVENT = TypeAdapter(Event)
_EVENTS = TypeAdapter(list[Event])


def event_from_json(data: str | bytes) -> Event:
    """Decode one event from the JSON that :func:`event_to_json` wrote."""
    return _EVENT.validate_json(data)


def events_from_json(data: str | bytes) -> list[Event]:
    """Decode a JSON list of events."""
    return _EVENTS.validate_json(data)


def event_to_json(event: Event) -> str:
    """The event as JSON, with its ``type`` tag (unset fields left out)."""
    return event.model_dump_json(exclude_defaults=False)
