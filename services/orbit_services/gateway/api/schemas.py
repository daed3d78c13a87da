"""The shapes of the HTTP API's bodies, for request validation and the OpenAPI document.

The operations in :mod:`orbit_services.gateway.api.executions` return plain JSON data or,
for executions, the pure core's view models (:mod:`orbit_model.views`); these models
check it on the way out and describe it in ``/openapi.json``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from orbit_model.repeated_starts import OnConflict
from orbit_model.views import ExecutionView


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
    on_conflict: OnConflict = Field(
        "fail",
        description="When `execution_id` exists and was started with another version or"
        " input: `fail` answers 409 `EXECUTION_EXISTS` naming what differs; `use_existing`"
        " answers `created: false` with the existing execution. The same start again is"
        " always `created: false`; another workflow's id is always refused.",
    )


MAX_BATCH_STARTS = 1000
"""Starts one ``POST /v1/executions/batch`` may carry."""


class BatchStartRequest(_Request):
    executions: list[JsonValue] = Field(
        max_length=MAX_BATCH_STARTS,
        description="Up to 1,000 starts, each as `POST /v1/executions` takes it:"
        " `{workflow, version?, input?, execution_id?, on_conflict?}`. One that is not of"
        " that shape is refused on its own (`INVALID_REQUEST` in its result).",
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
    taken: Literal["now", "later", "never", "already"] = Field(
        description="Which `await` step takes it (a signal waits in a buffer until one"
        " does): `now`, one of `steps` waits for it; `later`, none waits now, and it is"
        " kept until one of `steps`, not reached yet, takes it; `never`, no `await` of its"
        " name is left to take it (`signals.NAME` still reads it); `already`, sent again"
        " with its `request_id`, and taken by `steps`."
    )
    steps: list[str]


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
