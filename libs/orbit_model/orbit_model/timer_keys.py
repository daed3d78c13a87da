"""The key of a timer an execution waits on: what it is for, and what it names.

A timer's key is stored as text (the ``timers`` table, a ``TimerDue``'s
``key``, a ``TimerFired`` event), so its form is part of the wire protocol and
of every stored history: ``workflow`` for the workflow timeout, else
``KIND:SUBJECT``, where the subject is a unit (``retry:charge``,
``timer:wait[2]``) or a delivery token (``timeout:TOKEN``, ``schedule:TOKEN``,
``heartbeat:TOKEN``; a token holds colons of its own). :class:`TimerKey` is
the one place that text is read and written.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from orbit_model.errors import ErrorCode, OrbitError


class TimerKind(StrEnum):
    """What a timer is for: the part of its key before the first colon."""

    WORKFLOW = "workflow"
    """The workflow timeout; its key is the kind alone."""
    RETRY = "retry"
    """A unit's retry backoff; names the unit."""
    TIMER = "timer"
    """A sleep, or an await's timeout; names the unit."""
    TIMEOUT = "timeout"
    """An attempt's timeout; names its delivery token."""
    SCHEDULE = "schedule"
    """An attempt's schedule deadline (no worker took it yet); names its delivery token."""
    HEARTBEAT = "heartbeat"
    """An attempt's heartbeat deadline; names its delivery token."""

    @property
    def names_token(self) -> bool:
        """Whether a key of this kind ends in a delivery token (else it names a unit)."""
        return self in _TOKEN_KINDS

    @property
    def is_liveness(self) -> bool:
        """Whether firing it must first ask who holds the delivery (a schedule or a
        heartbeat deadline: ``orbit_model.inputs.accept_liveness_check``)."""
        return self in _LIVENESS_KINDS


_TOKEN_KINDS = frozenset({TimerKind.TIMEOUT, TimerKind.SCHEDULE, TimerKind.HEARTBEAT})
_LIVENESS_KINDS = frozenset({TimerKind.SCHEDULE, TimerKind.HEARTBEAT})


class MalformedTimerKey(OrbitError, ValueError):
    """Text that is not a timer key: an unknown kind, or a subject missing or not wanted
    (``INVALID_REQUEST``: only a forged message could carry one)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_REQUEST, message)


@dataclass(frozen=True, slots=True)
class TimerKey:
    """A timer key, read (:meth:`parse`) or made to be written (``str(key)``)."""

    kind: TimerKind
    subject: str = ""
    """The unit or delivery token it names; empty for the workflow timeout only."""

    def __post_init__(self) -> None:
        if self.kind is TimerKind.WORKFLOW and self.subject:
            raise MalformedTimerKey(f"the workflow timer names no subject: {self.subject!r}")
        if self.kind is not TimerKind.WORKFLOW and not self.subject:
            raise MalformedTimerKey(f"a {self.kind} timer names a unit or a delivery token")

    @classmethod
    def parse(cls, text: str) -> TimerKey:
        """The key ``text`` writes.

        Raises:
            MalformedTimerKey: ``text`` is not one (an unknown kind, no subject).
        """
        kind, colon, subject = text.partition(":")
        try:
            timer_kind = TimerKind(kind)
        except ValueError:
            raise MalformedTimerKey(f"{text!r} is not a timer key: unknown kind {kind!r}") from None
        if timer_kind is TimerKind.WORKFLOW and colon:
            raise MalformedTimerKey(f"{text!r} is not a timer key: workflow names no subject")
        return cls(timer_kind, subject)

    @classmethod
    def workflow(cls) -> TimerKey:
        """The workflow timeout's key."""
        return cls(TimerKind.WORKFLOW)

    def __str__(self) -> str:
        if self.kind is TimerKind.WORKFLOW:
            return self.kind.value
        return f"{self.kind.value}:{self.subject}"


WORKFLOW_TIMER = str(TimerKey.workflow())
"""The workflow timeout's key as stored: ``workflow``."""
