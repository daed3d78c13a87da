"""The shapes of the HTTP API's bodies, for request validation and the OpenAPI document.

The operations in :mod:`orbit_services.gateway.executions` return plain JSON data;
these models check it on the way out and describe it in ``/openapi.json``. The
shape of a step's view is the pure core's (:mod:`orbit_model.view_shapes`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from orbit_model.view_shapes import StepView, StepWait

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


MAX_BATCH_STARTS = 1000
"""Starts one ``POST /v1/executions/batch`` may carry."""


class BatchStartRequest(_Request):
    executions: list[JsonValue] = Field(
        max_length=MAX_BATCH_STARTS,
        description="Up to 1,000 starts, each as `POST /v1/executions` takes it:"
        " `{workflow, version?, input?, execution_id?}`. One that is not of that shape"
        " is refused on its own (`INVALID_REQUEST` in its result).",
    )


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
    execution: ExecutionView | None = None
    """With ``?wait=``: the execution once it ended, or as it is when the wait ran out."""


class BatchResult(BaseModel):
    execution_id: str | None
    """Null for a refused start that named no id."""
    created: bool
    error: ErrorDetail | None = None
    """Why this start was refused (the others are not affected)."""


class BatchStarted(BaseModel):
    results: list[BatchResult]
    """One per start, in the order sent."""


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


class LostMessage(BaseModel):
    """A parked message: its type, the queue that parked it, RabbitMQ's reason
    (``delivery_limit``, ``rejected``, …) and a detail (a signal's name, a timer's key)."""

    message_type: str
    queue: str
    reason: str
    detail: str


class ExecutionView(ExecutionSummary):
    input: JsonValue
    output: JsonValue
    error: dict[str, JsonValue] | None
    steps: dict[str, StepView]
    waiting_for: list[StepWait]
    """Why the execution has not ended yet: the reason of each waiting step, those only
    behind other steps left out; empty once it has ended."""
    lost_messages: list[LostMessage]
    """Messages for the execution that RabbitMQ parked in the dead-letter queue, so
    never acted on (a signal, a timer's firing, a cancel); usually empty."""


class HistoryEntry(BaseModel):
    seq: int
    recorded_at: str
    type: str
    data: dict[str, JsonValue]
    """The event's fields; empty for an event that no longer decodes."""
    raw: str | None = None
    """An event that no longer decodes: its stored JSON (cut to 4,000 characters)."""
    error: ErrorDetail | None = None
    """An event that no longer decodes: ``HISTORY_UNREADABLE``, saying why."""


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


class DeciderView(BaseModel):
    decider_id: str
    host: str
    pid: int
    started_at: str
    seen_at: str
    live: bool
    """Whether it beat within the lease time."""
    partitions: list[int]
    """The partitions it holds a current lease on."""


class DecidersView(BaseModel):
    partitions: int
    """The installation's partition count."""
    deciders: list[DeciderView]
    """Every decider heard from in the last hour."""
    unowned: list[int]
    """Partitions no decider holds now (between a death and its takeover)."""
    balanced: bool
    """Every partition held, and the live deciders' shares within one of each other."""


class Health(BaseModel):
    status: str
    checks: dict[str, str] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    """What an operator should know (authentication disabled)."""


Started.model_rebuild()  # its ExecutionView is defined below it
