"""The operator views: what an execution and each of its steps is and waits for.

:mod:`.models` holds their shapes (pydantic models, the API's and its clients'),
:mod:`.steps` builds them from a replayed state.
"""

from __future__ import annotations

from orbit_model.views.models import (
    ExecutionPage,
    ExecutionSummary,
    ExecutionView,
    HistoryView,
    LostMessageView,
    Status,
    StepView,
    StepWait,
    UnitView,
    WaitingFor,
    WaitsForChild,
    WaitsForDependencies,
    WaitsForDispatch,
    WaitsForElements,
    WaitsForHttp,
    WaitsForRedelivery,
    WaitsForRetry,
    WaitsForSignal,
    WaitsForTimer,
    WaitsForWorker,
    view_json,
)
from orbit_model.views.steps import (
    execution_waiting_for,
    history_view,
    iso_ms,
    lost_messages_view,
    needs_workers,
    step_kind,
    steps_view,
)

__all__ = [
    "ExecutionPage",
    "ExecutionSummary",
    "ExecutionView",
    "HistoryView",
    "LostMessageView",
    "Status",
    "StepView",
    "StepWait",
    "UnitView",
    "WaitingFor",
    "WaitsForChild",
    "WaitsForDependencies",
    "WaitsForDispatch",
    "WaitsForElements",
    "WaitsForHttp",
    "WaitsForRedelivery",
    "WaitsForRetry",
    "WaitsForSignal",
    "WaitsForTimer",
    "WaitsForWorker",
    "execution_waiting_for",
    "history_view",
    "iso_ms",
    "lost_messages_view",
    "needs_workers",
    "step_kind",
    "steps_view",
    "view_json",
]
