"""What the store takes and gives: appends, stored events, rows and the conflict error.

A worker session (:class:`~orbit_model.workers.WorkerSession`) is the pure core's type:
the views read it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.events import Event
from orbit_model.messages import Route, encode
from orbit_model.shown_tokens import shown_event_data
from orbit_model.state import ExecutionState


class AppendConflict(OrbitError):
    """Another writer appended to these executions first: re-read, decide again (``CONFLICT``)."""

    def __init__(self, execution_ids: Sequence[str]) -> None:
        super().__init__(ErrorCode.CONFLICT, f"concurrent append to {', '.join(execution_ids)}")
        self.execution_ids = tuple(execution_ids)


@dataclass(frozen=True)
class OutboxMessage:
    """A message to publish once the transaction that wrote it commits."""

    exchange: str
    routing_key: str
    body: bytes
    headers: Mapping[str, str] | None = None
    """AMQP headers (a task's ``traceparent``)."""

    @classmethod
    def to(
        cls, route: Route, message: BaseModel, headers: Mapping[str, str] | None = None
    ) -> OutboxMessage:
        """``message``, encoded, for ``route``'s exchange and routing key."""
        return cls(route.exchange, route.routing_key, encode(message), headers)


@dataclass(frozen=True)
class Append:
    """New events of one execution, and what they change around them.

    Attributes:
        execution_id: The execution.
        expected_seq: The last seq the writer had read; the events take the next ones.
        events: The events, in order.
        state: The execution's state after them.
        timers_before: The state's timers before them, to write only the difference.
        outbox: Messages the events call for.
        snapshot: Whether to store ``state`` as the execution's snapshot too (the
            decider asks every ``ORBIT_SNAPSHOT_EVERY`` events).
    """

    execution_id: str
    expected_seq: int
    events: Sequence[Event]
    state: ExecutionState
    timers_before: Mapping[str, int] = field(default_factory=dict)
    outbox: Sequence[OutboxMessage] = ()
    snapshot: bool = False


@dataclass(frozen=True)
class StoredEvent:
    seq: int
    recorded_at: datetime
    event: Event

    def to_json_data(self) -> dict[str, Any]:
        """Its entry in the history the API and the console show: ``{seq, recorded_at,
        type, data}``, each delivery token without its MAC."""
        return {
            "seq": self.seq,
            "recorded_at": self.recorded_at.isoformat(),
            "type": self.event.type,
            # Never the delivery secret nor a token's MAC: whoever reads either could
            # answer for a task.
            "data": shown_event_data(self.event),
        }


@dataclass(frozen=True)
class ExecutionRow:
    """One line of ``executions``: what listing and lookup need without a replay."""

    execution_id: str
    position: int
    workflow: str
    version: str
    definition_hash: str
    status: str
    parent: str | None
    created_at: datetime
    closed_at: datetime | None
    input: Any = None
    output: Any = None
    error: Any = None
    last_seq: int = 0


@dataclass(frozen=True)
class DefinitionRow:
    name: str
    version: str
    hash: str
    registered_at: datetime


@dataclass(frozen=True)
class Backlog:
    timers_due: int
    """Timers whose due time has passed and that have not fired yet."""
    outbox_depth: int
    """Outbox rows not yet published (normally published within milliseconds)."""
    outbox_oldest_seconds: float
    """Age of the oldest outbox row; 0 when there is none."""


@dataclass(frozen=True)
class DueTimer:
    """A timer the timer service took to fire."""

    execution_id: str
    key: str
    due_at: int


@dataclass(frozen=True)
class StaleOutboxRow:
    """An outbox row its writer did not publish (it died, or lost the broker)."""

    id: int
    exchange: str
    routing_key: str
    body: bytes
    headers: Mapping[str, str] | None
    age_seconds: float


def api_status(state: ExecutionState) -> str:
    """The status clients see: an execution not yet decided on is already running."""
    return "running" if state.status in ("new", "created") else state.status


def execution_row(row: Any, **details: Any) -> ExecutionRow:
    """An ``asyncpg.Record`` of the columns a listing reads, plus what a lookup adds
    (``details``)."""
    return ExecutionRow(
        execution_id=row["execution_id"],
        position=row["position"],
        workflow=row["workflow"],
        version=row["version"],
        definition_hash=row["definition_hash"],
        status=row["status"],
        parent=row["parent"],
        created_at=row["created_at"],
        closed_at=row["closed_at"],
        **details,
    )
