"""What each step of an execution is waiting for, as a short text, from the execution view.

The view (``GET /v1/executions/{id}``) carries each step's ``kind`` and
``waiting_for``: a worker for ``task@version`` and how many are online, a
signal, a retry or a timer and when it is due, a child execution, the steps
it runs after, or a ``for`` step's elements. This module only words it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any


def waiting_for(view: Mapping[str, Any], *, now: datetime | None = None) -> str:
    """A short text of what the step waits for; empty when it waits for nothing.

    Args:
        view: The step as the execution view shows it.
        now: The time to count "in 5m" from (default: now).
    """
    wait = view.get("waiting_for")
    if not wait:
        return ""
    kind = wait.get("kind")
    if kind == "worker":
        return f"a worker for {wait.get('task')} ({_workers(wait)})"
    if kind == "signal":
        timeout = wait.get("timeout_at")
        if timeout is None:
            return f"signal {wait.get('name')}"
        return f"signal {wait.get('name')} (times out {_at(timeout, now)})"
    if kind == "retry":
        return f"retry (attempt {wait.get('attempt')}) {_at(wait.get('at'), now)}".rstrip()
    if kind == "timer":
        return f"timer {_at(wait.get('at'), now)}".rstrip()
    if kind == "child":
        return f"child workflow {wait.get('workflow')} ({wait.get('execution_id')})"
    if kind == "dependencies":
        return "steps " + ", ".join(wait.get("steps") or ())
    if kind == "elements":
        counts = wait.get("counts") or {}
        text = "elements: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        if wait.get("workers_online") is not None:
            text += f" (a worker for {wait.get('task')}: {_workers(wait)})"
        return text
    if kind == "redelivery":
        return f"redelivery of attempt {wait.get('attempt')} (its worker was lost)"
    if kind == "http":
        return "the HTTP adapter"
    if kind == "dispatch":
        return "dispatch"
    return str(kind)


def _workers(wait: Mapping[str, Any]) -> str:
    online = int(wait.get("workers_online") or 0)
    text = "none online" if online == 0 else f"{online} online"
    if wait.get("held_by"):
        text += f", held by {wait['held_by']}"
    elif wait.get("held"):
        text += f", {wait['held']} held"
    return text


def _at(iso: str | None, now: datetime | None) -> str:
    if not iso:
        return ""
    when = datetime.fromisoformat(iso.replace("Z", "+00:00"))
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
