"""Why an execution waits, in plain words, from its operator view's ``waiting_for``.

Each reason names its step and what would move it on: "waiting for signal
``approval``", "waiting for a worker for ``pay@1`` (none online)", "retry 3
of 5 at 14:02:10". Times are shown in UTC, as everywhere in the console.
"""

from __future__ import annotations

from datetime import datetime

from orbit_model.ir import CallStep, WorkflowIR
from orbit_model.views import (
    ExecutionView,
    WaitingFor,
    WaitsForChild,
    WaitsForDispatch,
    WaitsForElements,
    WaitsForHttp,
    WaitsForRedelivery,
    WaitsForRetry,
    WaitsForSignal,
    WaitsForTimer,
    WaitsForWorker,
)


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


def reason(step: str, wait: WaitingFor, ir: WorkflowIR) -> str:
    """What ``step`` waits for (an item of the view's ``waiting_for``) as a sentence."""
    match wait:
        case WaitsForSignal():
            text = f"waiting for signal {wait.name}"
            if wait.timeout_at:
                text += f" (until {clock(wait.timeout_at)})"
            return text
        case WaitsForWorker() if wait.held_by:
            return f"{step}: running on worker {wait.held_by} (attempt {wait.attempt})"
        case WaitsForWorker():
            return (
                f"{step}: waiting for a worker for {wait.task}"
                f"{_workers(wait.task, wait.workers_online)}"
            )
        case WaitsForRetry():
            most = _max_attempts(ir, step)
            of = f" of {most}" if most is not None else ""
            error = f" after {wait.last_error}" if wait.last_error else ""
            return f"{step}: retry {wait.attempt}{of} at {clock(wait.at)}{error}"
        case WaitsForTimer():
            return f"{step}: sleeping until {clock(wait.at)}"
        case WaitsForChild():
            return f"{step}: waiting for child execution {wait.execution_id} ({wait.workflow})"
        case WaitsForHttp():
            return f"{step}: the HTTP adapter runs attempt {wait.attempt}"
        case WaitsForRedelivery():
            return f"{step}: its worker was lost; attempt {wait.attempt} is sent again"
        case WaitsForDispatch():
            return f"{step}: about to be dispatched"
        case WaitsForElements():
            return _elements_reason(step, wait)
    return f"{step}: waiting ({wait.kind})"


def _elements_reason(step: str, wait: WaitsForElements) -> str:
    done = sum(wait.counts.get(s, 0) for s in ("succeeded", "failed", "skipped", "cancelled"))
    text = f"{step}: {done} of {wait.total} elements done"
    if wait.workers_online is not None:  # a task's: a child's or HTTP's count no workers
        text += f", for {wait.task}{_workers(wait.task, wait.workers_online)}"
    return text


def reasons(view: ExecutionView, ir: WorkflowIR) -> list[str]:
    """The reasons of the execution's ``waiting_for``, each its step's typed wait."""
    shown = []
    for wait in view.waiting_for:
        step_wait = view.steps[wait.step].waiting_for
        if step_wait is not None:
            shown.append(reason(wait.step, step_wait, ir))
    return shown
