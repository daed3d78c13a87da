"""Executions, steps and workers as JSON-ready data: what the API answers with."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Any

from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.ir import WorkflowIR
from orbit_model.state import ExecutionState, UnitState
from orbit_model.units import COMPENSATE_PREFIX, FINALLY_PREFIX, element_key
from orbit_runtime.sessions import WorkerSession
from orbit_runtime.store import ExecutionRow

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


def steps_view(state: ExecutionState, ir: WorkflowIR) -> dict[str, dict[str, Json]]:
    """Each main and ``finally`` step by id: status, attempt, output, error (and more, below)."""
    steps = {step.id: _step(state, step.id) for step in ir.steps}
    steps.update({step.id: _step(state, FINALLY_PREFIX + step.id) for step in ir.finally_steps})
    return steps


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
