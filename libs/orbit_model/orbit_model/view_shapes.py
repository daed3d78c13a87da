"""The shapes of the operator views (:mod:`orbit_model.views`), as pydantic models.

The views are plain JSON data; these models say what each holds. The
gateway checks its answers against them and documents them in its OpenAPI
document; a console or a client can read a view back through them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue


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
