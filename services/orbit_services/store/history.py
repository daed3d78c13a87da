"""Histories as stored: the events that decode, and those that no longer do.

Every read of a history decodes each stored event into its model. One that
cannot be decoded any more (its JSON nests deeper than the decoder goes, a
field no longer validates, its kind is unknown) is not an error of the read:
it comes back as an :class:`UndecodedEvent`, as stored, so that each reader
decides what to do with it. Folding a history stops at the first one
(:func:`fold` raises :class:`HistoryUnreadable`): the decider then fails the
execution, the gateway still shows its row and its raw events.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.events import TERMINAL_EVENTS, Event, TaskFailure, event_from_json
from orbit_model.shown_tokens import without_macs
from orbit_model.state import ExecutionState, evolve_all
from orbit_model.unreadable import decode_problem, unreadable_failure

_SECRET = re.compile(r'"delivery_secret"\s*:\s*"[^"]*"')
"""An execution's delivery secret, in a stored event shown raw: never shown."""
RAW_SHOWN_CHARS = 4000
"""How much of an undecodable event's stored JSON its history entry shows."""


@dataclass(frozen=True)
class UndecodedEvent:
    """A stored event that does not decode into its model, as it is stored."""

    seq: int
    recorded_at: datetime
    type: str
    """As stored (the ``type`` column), whatever the JSON says."""
    data: str
    """The stored JSON text."""
    problem: str
    """Why it does not decode: one line, cut short."""

    def failure(self) -> TaskFailure:
        """``HISTORY_UNREADABLE``, naming this event and why."""
        return unreadable_failure(self.seq, self.type, self.problem)

    def to_json_data(self) -> dict[str, Any]:
        """Its entry in the history the API shows: no ``data``, its ``raw`` JSON cut
        short (no delivery secret, no token's MAC) and an ``error`` saying why it does
        not decode."""
        raw = without_macs(_SECRET.sub('"delivery_secret": "(hidden)"', self.data))
        if len(raw) > RAW_SHOWN_CHARS:
            raw = raw[: RAW_SHOWN_CHARS - 1] + "…"
        failure = self.failure()
        return {
            "seq": self.seq,
            "recorded_at": self.recorded_at.isoformat(),
            "type": self.type,
            "data": {},
            "raw": raw,
            "error": {"code": failure.code, "message": failure.message},
        }


def decoded(seq: int, recorded_at: datetime, stored_type: str, data: str) -> Event | UndecodedEvent:
    """The stored event, or what is stored of it when it no longer decodes."""
    try:
        return event_from_json(data)
    # pydantic's ValidationError (a ValueError) for anything the JSON holds; a
    # RecursionError should a validator ever go deeper than Python allows.
    except (ValueError, RecursionError) as error:
        return UndecodedEvent(seq, recorded_at, stored_type, data, decode_problem(error))


def unreadable(execution_id: str, event: UndecodedEvent) -> str:
    """The message of ``HISTORY_UNREADABLE`` for a request about the execution."""
    return f"the history of execution {execution_id!r} cannot be read: {event.failure().message}"


class HistoryUnreadable(OrbitError):
    """An execution's history holds an event that no longer decodes (``HISTORY_UNREADABLE``).

    Attributes:
        execution_id: The execution.
        event: The first event that does not decode.
        before: The state folded from the events before it.
        last_seq: The seq of the last event stored (the next append follows it).
        ended: Whether the history already holds the execution's end (a terminal
            event, before the bad one or after it): nothing is left to decide.
    """

    def __init__(
        self,
        execution_id: str,
        event: UndecodedEvent,
        before: ExecutionState,
        last_seq: int,
        ended: bool,
    ) -> None:
        super().__init__(ErrorCode.HISTORY_UNREADABLE, unreadable(execution_id, event))
        self.execution_id = execution_id
        self.event = event
        self.before = before
        self.last_seq = last_seq
        self.ended = ended


def fold(
    execution_id: str, state: ExecutionState, events: Sequence[Event | UndecodedEvent]
) -> ExecutionState:
    """``state`` after ``events`` (the ones stored after its ``last_seq``, in order).

    Raises:
        HistoryUnreadable: One of them does not decode; the fold stops before it.
    """
    for index, event in enumerate(events):
        if isinstance(event, UndecodedEvent):
            state = evolve_all(state, events[:index])  # type: ignore[arg-type]
            rest = events[index:]
            ended = state.terminal or any(later.type in TERMINAL_EVENTS for later in rest)
            # Seqs have no gaps: each append takes the ones right after the last.
            last_seq = event.seq + len(rest) - 1
            raise HistoryUnreadable(execution_id, event, state, last_seq, ended)
    return evolve_all(state, events)  # type: ignore[arg-type]
