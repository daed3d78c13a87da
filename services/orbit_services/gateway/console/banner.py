"""Why an execution waits, in plain words, from its operator view's ``waiting_for``.

Each reason names its step and what would move it on: "waiting for signal
``approval``", "waiting for a worker for ``pay@1`` (none online)", "retry 3
of 5 at 14:02:10". Times are shown in UTC, as everywhere in the console.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from orbit_model.ir import CallStep, WorkflowIR


def clock(iso: str | None) -> str:
    """``2026-01-02T14:02:10.123Z`` as ``14:02:10`` (its date too when not today)."""
    if not iso:
        return "an unknown time"
    moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    today = datetime.now(moment.tzinfo).date()
    shown = moment.strftime("%H:%M:%S")
    return shown if moment.date() == today else f"{moment:%Y-%m-%d} {shown}"


def _max_attempts(ir: WorkflowIR, step_id: str) -> int | None:
    for step in (*ir.steps, *ir.finally_steps):
        if step.id == step_id and isinstance(step, CallStep):
            return step.call.retry.max_attempts
    return None


def _workers(task: str, online: int | None) -> str:
    if online is None:
        return ""
    return " (none online)" if online == 0 else f" ({online} online)"


def reason(wait: Mapping[str, Any], ir: WorkflowIR) -> str:
    """One step's reason (an item of the view's ``waiting_for``) as a sentence."""
    step = wait.get("step", "?")
    kind = wait.get("kind")
    if kind == "signal":
        text = f"waiting for signal {wait['name']}"
        if wait.get("timeout_at"):
            text += f" (until {clock(wait['timeout_at'])})"
        return text
    if kind == "worker":
        task = wait["task"]
        if wait.get("held_by"):
            return f"{step}: running on worker {wait['held_by']} (attempt {wait['attempt']})"
        return f"{step}: waiting for a worker for {task}{_workers(task, wait['workers_online'])}"
    if kind == "retry":
        most = _max_attempts(ir, str(step))
        of = f" of {most}" if most is not None else ""
        error = f" after {wait['last_error']}" if wait.get("last_error") else ""
        return f"{step}: retry {wait['attempt']}{of} at {clock(wait.get('at'))}{error}"
    if kind == "timer":
        return f"{step}: sleeping until {clock(wait.get('at'))}"
    if kind == "child":
        return f"{step}: waiting for child execution {wait['execution_id']} ({wait['workflow']})"
    if kind == "http":
        return f"{step}: the HTTP adapter runs attempt {wait['attempt']}"
    if kind == "redelivery":
        return f"{step}: its worker was lost; attempt {wait['attempt']} is sent again"
    if kind == "dispatch":
        return f"{step}: about to be dispatched"
    if kind == "elements":
        counts = wait.get("counts", {})
        done = sum(counts.get(s, 0) for s in ("succeeded", "failed", "skipped", "cancelled"))
        text = f"{step}: {done} of {wait['total']} elements done"
        if "workers_online" in wait:
            text += f", for {wait['task']}{_workers(wait['task'], wait['workers_online'])}"
        return text
    return f"{step}: waiting ({kind})"


def reasons(waiting_for: Iterable[Mapping[str, Any]], ir: WorkflowIR) -> list[str]:
    return [reason(wait, ir) for wait in waiting_for]
