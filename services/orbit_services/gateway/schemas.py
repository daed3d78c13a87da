"""The shapes of the HTTP API's bodies, for request validation and the OpenAPI document.

The operations in :mod:`orbit_services.gateway.executions` return plain JSON data;
these models check it on the way out and describe it in ``/openapi.json``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

Status = Literal["running", "completed", "failed", "cancelled", "timed_out"]


class _Request(BaseModel):
    # A misspelt field is an error, not silently ignored.
    model_config = ConfigDict(extra="forbid")


class StartRequest(_Request):
    workflow: str = Field(min_length=1)
    version: str | None = None
    """None: the highest registered version."""
    input: JsonValue = None
    execution_id: str | None = None
    """Makes the start idempotent; a fresh id is made when absent."""


class CancelRequest(_Request):
    reason: str = ""


class Problem(BaseModel):
    line: int | None
    path: str
    message: str


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: list[Problem] | None = None
    """For ``INVALID_DEFINITION``: each problem of the definition."""


class ErrorResponse(BaseModel):
    error: ErrorDetail


class Registered(BaseModel):
    name: str
    version: str
    hash: str
    created: bool


class DefinitionSummary(BaseModel):
    name: str
    version: str
    hash: str
    registered_at: str


class Started(BaseModel):
    execution_id: str
    created: bool


class ExecutionSummary(BaseModel):
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


class UnitView(BaseModel):
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
    """The child execution (``GET /v1/executions/{it}`` says what it waits for)."""
    workflow: str


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
    elements: dict[str, int] | None = None
    """For a ``for`` step: how many of its elements are in each status."""
    compensation: UnitView | None = None
    """Once the step's compensation has begun."""
    kind: Literal["task", "http", "workflow", "await", "sleep", "for"]
    waiting_for: WaitingFor | None
    """Null unless the execution is running and the step waits."""


class ExecutionView(ExecutionSummary):
    input: JsonValue
    output: JsonValue
    error: dict[str, JsonValue] | None
    steps: dict[str, StepView]
    waiting_for: list[StepWait]
    """Why the execution has not ended yet: the reason of each waiting step, those only
    behind other steps left out; empty once it has ended."""


class HistoryEntry(BaseModel):
    seq: int
    recorded_at: str
    type: str
    data: dict[str, JsonValue]


class SignalAccepted(BaseModel):
    seq: int
    """The history seq of the recorded signal."""


class QueryValue(BaseModel):
    value: JsonValue


class Contract(BaseModel):
    task: str | None
    version: str | None


class WorkerView(BaseModel):
    worker_id: str
    runtime: str
    sdk: str | None
    contracts: list[Contract]
    online: bool
    sessions: int
    inflight: int
    last_seen: str


class Health(BaseModel):
    status: str
    checks: dict[str, str] = Field(default_factory=dict)
