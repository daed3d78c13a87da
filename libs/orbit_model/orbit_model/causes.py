"""An error's cause chain as the views hold it (JSON), for the CLI and the console.

A failed execution's or step's ``error`` may wrap another in its ``cause``, with
the ``step`` and ``execution_id`` where that one happened, down to the task's
error as the worker sent it (:class:`orbit_model.events.TaskFailure`). These
helpers read that chain from the JSON of a view, whoever shows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Cause:
    """One level of a cause chain."""

    code: str
    message: str
    step: str | None
    execution_id: str | None
    details: Any

    def where(self, shown_execution: str | None = None) -> str:
        """Where it happened, in words: ``step charge of order-7:invoice``; the execution
        is left out when it is ``shown_execution`` (the one on screen)."""
        parts = []
        if self.step:
            parts.append(f"step {self.step}")
        if self.execution_id and self.execution_id != shown_execution:
            parts.append(f"of {self.execution_id}" if self.step else f"in {self.execution_id}")
        return " ".join(parts)


def causes_of(error: Any) -> list[Cause]:
    """The causes ``error`` wraps, outermost first (empty without one, or for anything
    that is not an error's JSON)."""
    found: list[Cause] = []
    cause = error.get("cause") if isinstance(error, Mapping) else None
    while isinstance(cause, Mapping):
        found.append(
            Cause(
                code=str(cause.get("code", "")),
                message=str(cause.get("message", "")),
                step=_text(cause.get("step")),
                execution_id=_text(cause.get("execution_id")),
                details=cause.get("details"),
            )
        )
        cause = cause.get("cause")
    return found


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
