"""Executions, steps and workers as JSON-ready data: what the API answers with."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from orbit_model.children import child_execution_id
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.ir import HTTP_TASK, AwaitStep, CallStep, SleepStep, WorkflowIR
from orbit_model.state import ExecutionState, UnitState, UnitStatus
from orbit_model.units import COMPENSATE_PREFIX, FINALLY_PREFIX, element_key
from orbit_services.store import ExecutionRow, WorkerSession

Json = Any


def encode_cursor(position: int) -> str:
    """The opaque cursor of a listing position."""
    return base64.urlsafe_b64encode(f"p{position}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    """The position a cursor of :func:`encode_cursor` names.

    Raises:
        OrbitError: ``INVALID_REQUEST`` for anything else.
    """
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        if text.startswith("p"):
            return int(text[1:])
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise OrbitError(ErrorCode.INVALID_REQUEST, f"{cursor!r} is not a cursor of this listing")


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def summary(row: ExecutionRow) -> dict[str, Json]:
    """An execution as listings show it."""
    return {
        "execution_id": row.execution_id,
        "workflow": row.workflow,
        "version": row.version,
        "status": row.status,
        "parent": row.parent,
        "created_at": row.created_at.isoformat(),
        "closed_at": _iso(row.closed_at),
    }


@dataclass(frozen=True)
class Workers:
    """The live worker sessions a view needs: who serves which ``task@version``, who holds what.

    Attributes:
        online: ``task@version`` to the number of live sessions announcing it.
        holders: Delivery token to the worker holding it at its last heartbeat.
    """

    online: Mapping[str, int] = field(default_factory=dict)
    holders: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, sessions: list[WorkerSession], seen_after: datetime) -> Workers:
        """From every session, counting those open and seen after ``seen_after``."""
        online: dict[str, int] = {}
        holders: dict[str, str] = {}
        for session in sessions:
            if session.closed_at is not None or session.last_seen <= seen_after:
                continue
            served = {f"{c.get('task')}@{c.get('version')}" for c in session.contracts}
            for task in served:
                online[task] = online.get(task, 0) + 1
            for held in session.inflight:
                holders[held.token] = session.worker_id
        return cls(online, holders)


def iso_ms(epoch_ms: int | None) -> str | None:
    """Epoch milliseconds as ISO 8601 UTC (``2026-01-02T03:04:05.678Z``)."""
    if epoch_ms is None:
        return None
    moment = datetime.fromtimestamp(epoch_ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def steps_view(
    state: ExecutionState, ir: WorkflowIR, workers: Workers | None = None
) -> dict[str, dict[str, Json]]:
    """Each main and ``finally`` step by id: status, attempt, output, error, kind, waiting_for.

    ``waiting_for`` is null unless the execution is running and the step
    waits; ``workers`` (the live sessions) fill in a worker wait's
    ``workers_online`` and ``held_by``.
    """
    scope = _Scope(state, ir, workers or Workers())
    steps: dict[str, dict[str, Json]] = {}
    main_ids = tuple(step.id for step in ir.steps)
    for step in ir.steps:
        steps[step.id] = _step(state, step.id)
        steps[step.id].update(_kind_and_wait(scope, step, step.id, step.after))
    for final in ir.finally_steps:
        key = FINALLY_PREFIX + final.id
        # A cleanup step runs once the main steps are done, then after its own ``after``.
        after = (*main_ids, *(FINALLY_PREFIX + a for a in final.after))
        steps[final.id] = _step(state, key)
        steps[final.id].update(_kind_and_wait(scope, final, key, after))
    return steps


def execution_waiting_for(steps: Mapping[str, Mapping[str, Json]]) -> list[dict[str, Json]]:
    """What the execution waits for: each step's reason, those waiting on other steps left out.

    A step behind others is not why the execution is stuck; the steps it waits
    for are, and they are listed themselves.
    """
    return [
        {"step": step_id, **view["waiting_for"]}
        for step_id, view in steps.items()
        if view.get("waiting_for") and view["waiting_for"].get("kind") != "dependencies"
    ]


def step_kind(step: CallStep | AwaitStep | SleepStep) -> str:
    """``task``, ``http``, ``workflow``, ``await``, ``sleep``, or ``for`` for a fan-out."""
    if isinstance(step, CallStep) and step.for_each is not None:
        return "for"
    return step.kind


def _task_of(ir: WorkflowIR, step: CallStep) -> str:
    if step.child is not None:
        return f"{step.child.name}@{step.child.version}"
    contract = ir.tasks.get(step.call.task)
    return step.call.task if contract is None else f"{step.call.task}@{contract.version}"


@dataclass(frozen=True)
class _Scope:
    """What every step's reason is read from."""

    state: ExecutionState
    ir: WorkflowIR
    workers: Workers


def _kind_and_wait(
    scope: _Scope, step: CallStep | AwaitStep | SleepStep, key: str, after: tuple[str, ...]
) -> dict[str, Json]:
    running = scope.state.status == "running"
    wait = _waiting_for(scope, step, key, after) if running else None
    return {"kind": step_kind(step), "waiting_for": wait}


def _waiting_for(
    scope: _Scope, step: CallStep | AwaitStep | SleepStep, key: str, after: tuple[str, ...]
) -> dict[str, Json] | None:
    state = scope.state
    unit = state.unit(key)
    status = unit.status
    if status.resolved:
        return None
    if status is UnitStatus.PENDING:
        blocking = [
            name.removeprefix(FINALLY_PREFIX)
            for name in after
            if not state.unit(name).status.resolved
        ]
        return {"kind": "dependencies", "steps": blocking} if blocking else None
    if isinstance(step, CallStep) and unit.items is not None:
        return _elements(scope, step, key, len(unit.items))
    if status is UnitStatus.RETRY_WAIT:
        return {
            "kind": "retry",
            "attempt": unit.attempt + 1,
            "at": iso_ms(unit.due_at),
            "last_error": None if unit.error is None else unit.error.code,
        }
    if status is UnitStatus.UNCERTAIN:
        return {"kind": "redelivery", "attempt": unit.attempt}
    if isinstance(step, AwaitStep):
        return {"kind": "signal", "name": step.signal, "timeout_at": iso_ms(unit.due_at)}
    if isinstance(step, SleepStep):
        return {"kind": "timer", "at": iso_ms(unit.due_at)}
    if status is UnitStatus.SCHEDULED:
        return {"kind": "dispatch"}
    return _call_wait(scope, step, key, unit)


def _call_wait(scope: _Scope, step: CallStep, key: str, unit: UnitState) -> dict[str, Json]:
    """What a dispatched call waits for: its child, the HTTP adapter or a worker."""
    if step.child is not None:
        return {
            "kind": "child",
            "execution_id": child_execution_id(scope.state.execution_id, key),
            "workflow": _task_of(scope.ir, step),
        }
    if step.call.task == HTTP_TASK:
        return {"kind": "http", "attempt": unit.attempt, "timeout_at": iso_ms(unit.timeout_at)}
    task = _task_of(scope.ir, step)
    return {
        "kind": "worker",
        "task": task,
        "workers_online": scope.workers.online.get(task, 0),
        "held_by": None if unit.token is None else scope.workers.holders.get(unit.token),
        "attempt": unit.attempt,
        "timeout_at": iso_ms(unit.timeout_at),
    }


def _elements(scope: _Scope, step: CallStep, key: str, total: int) -> dict[str, Json]:
    counts: dict[str, int] = {}
    held = 0
    for index in range(total):
        element = scope.state.unit(element_key(key, index))
        counts[element.status.value] = counts.get(element.status.value, 0) + 1
        if element.token is not None and element.token in scope.workers.holders:
            held += 1
    task = _task_of(scope.ir, step)
    wait: dict[str, Json] = {"kind": "elements", "total": total, "counts": counts, "task": task}
    if step.child is None and step.call.task != HTTP_TASK:
        wait.update(workers_online=scope.workers.online.get(task, 0), held=held)
    return wait


def needs_workers(state: ExecutionState) -> bool:
    """Whether a view of the state shows a worker wait (so the sessions are worth reading)."""
    return state.status == "running" and any(
        unit.status is UnitStatus.DISPATCHED for unit in state.units.values()
    )


def _unit(unit: UnitState) -> dict[str, Json]:
    return {
        "status": unit.status.value,
        "attempt": unit.attempt,
        "output": unit.output,
        "error": None if unit.error is None else unit.error.model_dump(mode="json"),
    }


def _step(state: ExecutionState, key: str) -> dict[str, Json]:
    """A step's own record; a ``for`` step also counts its elements by status."""
    unit = state.unit(key)
    view = _unit(unit)
    if unit.items is not None:
        counts: dict[str, int] = {}
        for index in range(len(unit.items)):
            status = state.unit(element_key(key, index)).status.value
            counts[status] = counts.get(status, 0) + 1
        view["elements"] = counts
    compensation = state.units.get(COMPENSATE_PREFIX + key)
    if compensation is not None:
        view["compensation"] = _unit(compensation)
    return view


def worker_view(
    worker_id: str, sessions: list[WorkerSession], seen_after: datetime
) -> dict[str, Json]:
    """A worker from its sessions (oldest first); those seen after ``seen_after`` are live."""
    latest = sessions[-1]  # sessions come ordered by registration
    live = [s for s in sessions if s.closed_at is None and s.last_seen > seen_after]
    return {
        "worker_id": worker_id,
        "runtime": latest.runtime,
        "sdk": latest.sdk,
        "contracts": [
            {"task": contract.get("task"), "version": contract.get("version")}
            for contract in latest.contracts
        ],
        "online": bool(live),
        "sessions": len(live),
        "inflight": sum(len(s.inflight) for s in live),
        "last_seen": max(s.last_seen for s in sessions).isoformat(),
    }
