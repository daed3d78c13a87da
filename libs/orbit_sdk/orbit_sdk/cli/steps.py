"""What each step of an execution is waiting for, as a short text, from the execution view.

The view (``GET /v1/executions/{id}``) carries each step's ``kind`` and
``waiting_for``: a worker for ``task@version`` and how many are online, a
signal, a retry or a timer and when it is due, a child execution, the steps
it runs after, or a ``for`` step's elements. This module only words it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only read here: the models load with the view that holds them
    from orbit_model.views import StepView, WaitsForElements, WaitsForWorker


def waiting_for(view: StepView, *, now: datetime | None = None) -> str:
    """A short text of what the step waits for; empty when it waits for nothing.

    Args:
        view: The step as the execution view shows it.
        now: The time to count "in 5m" from (default: now).
    """
    wait = view.waiting_for
    if wait is None:
        return ""
    if wait.kind == "worker":
        return f"a worker for {wait.task} ({_workers(wait)})"
    if wait.kind == "signal":
        if wait.timeout_at is None:
            return f"signal {wait.name}"
        return f"signal {wait.name} (times out {_at(wait.timeout_at, now)})"
    if wait.kind == "retry":
        return f"retry (attempt {wait.attempt}) {_at(wait.at, now)}".rstrip()
    if wait.kind == "timer":
        return f"timer {_at(wait.at, now)}".rstrip()
    if wait.kind == "child":
        return f"child workflow {wait.workflow} ({wait.execution_id})"
    if wait.kind == "dependencies":
        return "steps " + ", ".join(wait.steps)
    if wait.kind == "elements":
        text = "elements: " + ", ".join(f"{n} {s}" for s, n in sorted(wait.counts.items()))
        if wait.workers_online is not None:
            text += f" (a worker for {wait.task}: {_workers(wait)})"
        return text
    if wait.kind == "redelivery":
        return f"redelivery of attempt {wait.attempt} (its worker was lost)"
    if wait.kind == "http":
        return "the HTTP adapter"
    return str(wait.kind)  # dispatch


def _workers(wait: WaitsForWorker | WaitsForElements) -> str:
    online = wait.workers_online or 0
    text = "none online" if online == 0 else f"{online} online"
    if wait.kind == "worker":
        if wait.held_by:
            text += f", held by {wait.held_by}"
    elif wait.held:
        text += f", {wait.held} held"
    return text


def _at(iso: str | None, now: datetime | None) -> str:
    if not iso:
        return ""
    when = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    left = int((when - (now or datetime.now(UTC))).total_seconds() * 1000)
    relative = f"in {span(left)}" if left > 0 else "due now"
    return f"at {when.strftime('%Y-%m-%d %H:%M:%SZ')} ({relative})"


def span(ms: int) -> str:
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
