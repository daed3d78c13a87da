"""Executions as listings show them.

What each step waits for is the pure core's (:mod:`orbit_model.views`), and so
are a listing's cursors (:mod:`orbit_model.cursors`).
"""

from __future__ import annotations

from datetime import datetime

from orbit_model.views import ExecutionSummary
from orbit_services.store import ExecutionRow


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def summary(row: ExecutionRow) -> ExecutionSummary:
    """An execution as listings show it."""
    return ExecutionSummary(
        execution_id=row.execution_id,
        workflow=row.workflow,
        version=row.version,
        status=row.status,
        parent=row.parent,
        created_at=row.created_at.isoformat(),
        closed_at=_iso(row.closed_at),
    )
