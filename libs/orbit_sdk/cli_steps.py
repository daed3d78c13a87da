"""What each step of an execution is waiting for, from the API's answers.

The execution view (``GET /v1/executions/{id}``) gives each step's status and
attempt but not what kind of step it is, so the command line also reads the
definition's IR (``GET /v1/definitions/{name}/{version}``): an ``await`` step
that is ``scheduled`` waits for its signal, a dispatched task for a worker
serving ``task@version``. The times a retry or a sleep is due are in neither;
they come from the history's ``RetryScheduled`` and ``TimerStarted`` events.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

FINALLY_PREFIX = "finally:"
"""How the history names the unit of a ``finally`` step (the view uses the bare id)."""
_TIMER_EVENTS = ("RetryScheduled", "TimerStarted")
_HTTP_TASK = "orbit.http.request"


@dataclass(frozen=True)
class StepKind:
    """One step of a definition, as much as the command line needs of it.

    Attributes:
        kind: ``task``, ``http``, ``workflow``, ``await`` or ``sleep``.
        target: ``task@version``, the child ``name@version``, the signal name,
            or the sleep's duration in milliseconds as text.
        unit: The step's unit key in the history (``finally:ID`` for cleanup steps).
        after: The steps it runs after.
        timeout_ms: An ``await`` step's timeout, if it has one.
    """

    kind: str
    target: str
    unit: str
    after: tuple[str, ...] = ()
    timeout_ms: int | None = None


def step_kinds(ir: Mapping[str, Any]) -> dict[str, StepKind]:
    """Every main and ``finally`` step of a compiled definition (IR as JSON) by id."""
    tasks: Mapping[str, Any] = ir.get("tasks") or {}
    kinds: dict[str, StepKind] = {}
    groups = ((ir.get("steps") or [], ""), (ir.get("finally_steps") or [], FINALLY_PREFIX))
    for steps, prefix in groups:
        for step in steps:
            step_id = str(step["id"])
            kinds[step_id] = StepKind(
                kind=str(step.get("kind")),
                target=_target(step, tasks),
                unit=prefix + step_id,
                after=tuple(step.get("after") or ()),
                timeout_ms=step.get("timeout_ms"),
            )
    return kinds


def _target(step: Mapping[str, Any], tasks: Mapping[str, Any]) -> str:
    kind = step.get("kind")
    if kind == "await":
        return str(step.get("signal"))
    if kind == "sleep":
        return str(step.get("duration_ms"))
    if kind == "workflow":
        child = step.get("child") or {}
        return f"{child.get('name')}@{child.get('version')}"
    task = str((step.get("call") or {}).get("task"))
    version = (tasks.get(task) or {}).get("version")
    return task if version is None else f"{task}@{version}"


def due_times(history: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Unit key to the epoch milliseconds its latest retry or sleep timer is due."""
    due: dict[str, int] = {}
    for entry in history:
        data = entry.get("data") or {}
        if entry.get("type") in _TIMER_EVENTS and "unit" in data and "due_at" in data:
            due[str(data["unit"])] = int(data["due_at"])
    return due


def needs_due_times(execution: Mapping[str, Any], kinds: Mapping[str, StepKind]) -> bool:
    """Whether a step of this running execution waits on a timer whose time only history has."""
    if execution.get("status") != "running":
        return False
    for step_id, view in (execution.get("steps") or {}).items():
        kind = kinds.get(step_id)
        if view.get("status") == "retry_wait":
            return True
        if view.get("status") == "scheduled" and kind is not None and kind.kind == "sleep":
            return True
    return False


def waiting_for(
    view: Mapping[str, Any],
    kind: StepKind | None,
    *,
    running: bool,
    due: Mapping[str, int] | None = None,
    now: datetime | None = None,
) -> str:
    """A short text of what the step waits for; empty when it waits for nothing.

    Args:
        view: The step as the execution view shows it.
        kind: The step's kind from the IR; None if the definition could not be read.
        running: Whether the execution is running (a step of an ended one waits for nothing).
        due: The timers of :func:`due_times`, if read.
        now: The time to count "in 5m" from (default: now).
    """
    status = view.get("status")
    if not running or status in ("succeeded", "failed", "skipped", "cancelled"):
        return ""
    elements = view.get("elements")
    if elements:  # a ``for`` step: its elements do the waiting
        return "elements: " + ", ".join(f"{n} {s}" for s, n in sorted(elements.items()))
    when = None if kind is None or due is None else due.get(kind.unit)
    if status == "pending":
        return "" if kind is None or not kind.after else "steps " + ", ".join(kind.after)
    if status == "retry_wait":
        return f"retry (attempt {int(view.get('attempt') or 0) + 1}) {_at(when, now)}".rstrip()
    if status == "uncertain":
        return f"redelivery of attempt {view.get('attempt')} (its worker was lost)"
    if kind is None:
        return ""
    if status == "scheduled":
        if kind.kind == "await":
            if kind.timeout_ms is None:
                return f"signal {kind.target}"
            return f"signal {kind.target} (times out after {_span(kind.timeout_ms)})"
        if kind.kind == "sleep":
            return f"timer of {_span(int(kind.target))} {_at(when, now)}".rstrip()
        return "dispatch"
    if status == "dispatched":
        if kind.kind == "workflow":
            return f"child workflow {kind.target}"
        if kind.kind == "http" or kind.target == _HTTP_TASK:
            return "the HTTP adapter"
        return f"a worker for {kind.target}"
    return ""


def _at(epoch_ms: int | None, now: datetime | None) -> str:
    if epoch_ms is None:
        return ""
    when = datetime.fromtimestamp(epoch_ms / 1000, UTC)
    left = int((when - (now or datetime.now(UTC))).total_seconds() * 1000)
    relative = f"in {_span(left)}" if left > 0 else "due now"
    return f"at {when.strftime('%Y-%m-%d %H:%M:%SZ')} ({relative})"


def _span(ms: int) -> str:
    """``90061000`` as ``1d1h1m1s``; under a second as ``250ms``."""
    if ms < 1000:
        return f"{ms}ms"
    seconds = ms // 1000
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
