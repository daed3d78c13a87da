"""The execution page's steps table: the operator view's steps, with what only the
history tells (which worker ran a step, when it began and ended).

Pure. The status, attempt and error come from the view, so the error shown is
the current attempt's (the view drops a past attempt's error once another
runs); the worker and the times come from the history's events of the step's
units (its own, and its elements' for a ``for`` step).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orbit_model.units import FINALLY_PREFIX
from orbit_model.views import StepView, WaitsForWorker

_ENDS = frozenset({"StepSucceeded", "StepFailed", "StepSkipped", "StepCancelled"})
_STARTS = frozenset({"StepScheduled", "StepFanOut", "StepDispatched", "TimerStarted"})


@dataclass
class StepRow:
    step: str
    kind: str
    status: str
    attempt: int
    error: Mapping[str, Any] | None
    worker: str | None = None
    started: datetime | None = None
    ended: datetime | None = None
    elements: Mapping[str, int] | None = None

    @property
    def duration(self) -> str:
        if self.started is None or self.ended is None:
            return ""
        return human_duration((self.ended - self.started).total_seconds())


def human_duration(seconds: float) -> str:
    """``850 ms``, ``12.3 s``, ``4 min 05 s``, ``2 h 03 min``."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _step_of(unit: str) -> str:
    """The step a unit belongs to (``ship[3]`` → ``ship``, ``finally:unlock`` → ``unlock``)."""
    return unit.removeprefix(FINALLY_PREFIX).split("[", 1)[0]


def step_rows(steps: Mapping[str, StepView], history: Iterable[Mapping[str, Any]]) -> list[StepRow]:
    """One row per step of the view, in the view's order (the definition's)."""
    rows = {
        step_id: StepRow(
            step=step_id,
            kind=view.kind,
            status=view.status,
            attempt=view.attempt,
            error=view.error,
            elements=view.elements,
        )
        for step_id, view in steps.items()
    }
    for entry in history:
        data = entry.get("data") or {}
        unit = data.get("unit")
        if not isinstance(unit, str) or unit.startswith("compensate:"):
            continue
        row = rows.get(_step_of(unit))
        if row is None:
            continue
        at = datetime.fromisoformat(entry["recorded_at"])
        kind = entry["type"]
        if kind in _STARTS and row.started is None:
            row.started = at
        if data.get("worker_id"):
            row.worker = str(data["worker_id"])
        if kind in _ENDS and unit == _unit_key(row.step, unit):
            row.ended = at
    for row in rows.values():
        view = steps[row.step]
        wait = view.waiting_for
        if isinstance(wait, WaitsForWorker) and wait.held_by:
            row.worker = wait.held_by
        if view.status not in ("succeeded", "failed", "skipped", "cancelled"):
            row.ended = None  # running again, or not yet done: no end to show
    return list(rows.values())


def _unit_key(step: str, unit: str) -> str:
    """``unit`` when it is the step's own unit (not an element's), else ''."""
    return unit if unit.removeprefix(FINALLY_PREFIX) == step else ""
