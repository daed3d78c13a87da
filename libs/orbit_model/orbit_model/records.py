"""The records an execution's state is made of: its units, its buffered signals, its end.

They live apart from :mod:`orbit_model.state` so that the state's indexes
(:mod:`orbit_model.state_index`) can use them; ``orbit_model.state`` exports them too.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from orbit_model.events import AbortCause, TaskFailure


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
    fan_out_shares: dict[int, int] = Field(default_factory=dict)
    """For a child workflow's unit: the share of the fan-out budget each of its children
    holds, by the attempt that started it, until that child answers (:mod:`.fan_out`)."""


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
