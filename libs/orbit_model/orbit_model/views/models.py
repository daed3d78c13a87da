"""The operator views as pydantic models: an execution, each step and what it waits for.

:mod:`.steps` builds them from a replayed state; the gateway answers with them
(and documents them in its OpenAPI document), and the console, ``OrbitClient``
and ``orbit get`` read them. A view is sent with ``exclude_unset``: an optional
field a view does not apply to (a step's ``elements`` unless it is a ``for``) is
left out, not sent as null; :func:`view_json` dumps one so.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from orbit_model.json_value import Json

Status = Literal["running", "completed", "failed", "cancelled", "timed_out"]
"""The statuses an execution is shown in (and listings filter by)."""


def view_json(view: BaseModel) -> dict[str, Json]:
    """A view as the API sends it: JSON data, the fields it does not apply to left out."""
    return view.model_dump(mode="json", exclude_unset=True)


class UnitView(BaseModel):
    """A step's, or its compensation's, current attempt."""

    status: str
    attempt: int
    output: JsonValue
    error: dict[str, JsonValue] | None


class WaitsForWorker(BaseModel):
    """A dispatched task: a worker serving ``task`` must take it, or is running it."""

    kind: Literal["worker"]
    task: str
    """``task@version``."""
    workers_online: int
    """Live sessions (open, seen within the session timeout) serving ``task``."""
    held_by: str | None
    """The worker holding the attempt at its last heartbeat; null if none does yet."""
    attempt: int
    timeout_at: str | None


class WaitsForHttp(BaseModel):
    """A dispatched ``http`` step: the HTTP adapter runs it."""

    kind: Literal["http"]
    attempt: int
    timeout_at: str | None


class WaitsForChild(BaseModel):
    kind: Literal["child"]
    execution_id: str
    """The child execution of the attempt in flight (``GET /v1/executions/{it}`` says
    what it waits for)."""
    workflow: str
    attempt: int
    """The step's attempt that started it: each attempt runs a child of its own."""


class WaitsForSignal(BaseModel):
    kind: Literal["signal"]
    name: str
    timeout_at: str | None


class WaitsForRetry(BaseModel):
    kind: Literal["retry"]
    attempt: int
    """The attempt that is to come."""
    at: str | None
    last_error: str | None
    """The error code of the failed attempt."""


class WaitsForRedelivery(BaseModel):
    """The worker of an attempt was lost; the attempt is sent again."""

    kind: Literal["redelivery"]
    attempt: int


class WaitsForTimer(BaseModel):
    kind: Literal["timer"]
    at: str | None


class WaitsForDispatch(BaseModel):
    """Scheduled, not yet dispatched (a ``for`` step's concurrency cap, or a moment's delay)."""

    kind: Literal["dispatch"]


class WaitsForDependencies(BaseModel):
    kind: Literal["dependencies"]
    steps: list[str]
    """The steps it runs after that are not done yet."""


class WaitsForElements(BaseModel):
    """A ``for`` step: its elements do the waiting."""

    kind: Literal["elements"]
    total: int
    counts: dict[str, int]
    task: str
    workers_online: int | None = None
    """For a task: live sessions serving it."""
    held: int | None = None
    """For a task: elements a worker holds."""


WaitingFor = Annotated[
    WaitsForWorker
    | WaitsForHttp
    | WaitsForChild
    | WaitsForSignal
    | WaitsForRetry
    | WaitsForRedelivery
    | WaitsForTimer
    | WaitsForDispatch
    | WaitsForDependencies
    | WaitsForElements,
    Field(discriminator="kind"),
]
"""What a step waits for (times are ISO 8601 UTC)."""


class StepWait(BaseModel):
    """A step's reason in the execution's ``waiting_for``: ``step`` and the step's reason."""

    model_config = ConfigDict(extra="allow")

    step: str
    kind: str


class StepView(UnitView):
    """One step of an execution as operators see it (``steps.<id>`` of an execution view)."""

    elements: dict[str, int] | None = None
    """For a ``for`` step: how many of its elements are in each status."""
    compensation: UnitView | None = None
    """Once the step's compensation has begun."""
    children: list[str] | None = None
    """For a ``workflow`` step (not a ``for``): the child each attempt started, oldest
    first (``PARENT:STEP``, then ``PARENT:STEP:attempt-N``)."""
    kind: Literal["task", "http", "workflow", "await", "sleep", "for"]
    waiting_for: WaitingFor | None
    """Null unless the execution is running and the step waits."""


class LostMessageView(BaseModel):
    """A parked message: its type, the queue that parked it, RabbitMQ's reason
    (``delivery_limit``, ``rejected``, …) and a detail (a signal's name, a timer's key)."""

    message_type: str
    queue: str
    reason: str
    detail: str


class HistoryView(BaseModel):
    """What an execution's history decides of its view (:func:`.steps.history_view`)."""

    steps: dict[str, StepView]
    waiting_for: list[StepWait]
    """Why the execution has not ended yet: the reason of each waiting step, those only
    behind other steps left out; empty once it has ended."""
    lost_messages: list[LostMessageView]
    """Messages for the execution that RabbitMQ parked in the dead-letter queue, so
    never acted on (a signal, a timer's firing, a cancel); usually empty."""


class ExecutionSummary(BaseModel):
    """An execution as listings show it."""

    execution_id: str
    workflow: str
    version: str
    status: Status
    parent: str | None
    created_at: str
    closed_at: str | None


class ExecutionPage(BaseModel):
    items: list[ExecutionSummary]
    next_cursor: str | None
    """Pass it as ``cursor`` for the next page; null on the last one."""


class ExecutionView(ExecutionSummary):
    """An execution: its summary, input, output and error, each step and what the
    execution waits for (``GET /v1/executions/{id}``)."""

    input: JsonValue
    output: JsonValue
    error: dict[str, JsonValue] | None
    steps: dict[str, StepView]
    waiting_for: list[StepWait]
    """Why the execution has not ended yet (see :class:`HistoryView`)."""
    lost_messages: list[LostMessageView]
    """Messages RabbitMQ parked, never acted on (see :class:`HistoryView`)."""
    trace_id: str = Field("", exclude=True)
    """Its trace (:mod:`orbit_model.trace_ids`) as 32 hex digits, for the console; the
    API does not send it."""
