"""What each step of an execution is and waits for (the operator views, :mod:`.models`).

Pure: a view is computed from the replayed state, the definition and a
snapshot of the live worker sessions (:class:`~orbit_model.workers.Workers`).
The gateway answers ``GET /v1/executions/{id}`` with it, and ``orbit get``
shows it in words.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from orbit_model.children import child_execution_id, child_execution_ids
from orbit_model.ir import HTTP_TASK, AwaitStep, CallStep, SleepStep, WorkflowIR
from orbit_model.json_value import Json
from orbit_model.state import ExecutionState, UnitState, UnitStatus
from orbit_model.units import COMPENSATE_PREFIX, FINALLY_PREFIX, element_key
from orbit_model.views.models import (
    HistoryView,
    LostMessageView,
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
)
from orbit_model.workers import Workers


def iso_ms(epoch_ms: int | None) -> str | None:
    """Epoch milliseconds as ISO 8601 UTC (``2026-01-02T03:04:05.678Z``)."""
    if epoch_ms is None:
        return None
    moment = datetime.fromtimestamp(epoch_ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def steps_view(
    state: ExecutionState, ir: WorkflowIR, workers: Workers | None = None
) -> dict[str, StepView]:
    """Each main and ``finally`` step by id: status, attempt, output, error, kind, waiting_for.

    ``waiting_for`` is null unless the execution is running and the step
    waits; ``workers`` (the live sessions) fill in a worker wait's
    ``workers_online`` and ``held_by``.
    """
    scope = _ViewScope(state, ir, workers or Workers())
    steps: dict[str, StepView] = {}
    main_ids = tuple(step.id for step in ir.steps)
    for step in ir.steps:
        steps[step.id] = _step_view(scope, step, step.id, step.after)
    for final in ir.finally_steps:
        # A cleanup step runs once the main steps are done, then after its own ``after``.
        after = (*main_ids, *(FINALLY_PREFIX + a for a in final.after))
        steps[final.id] = _step_view(scope, final, FINALLY_PREFIX + final.id, after)
    return steps


def _step_view(
    scope: _ViewScope, step: CallStep | AwaitStep | SleepStep, key: str, after: tuple[str, ...]
) -> StepView:
    """A step's own record, its kind and wait; a ``for`` step also counts its elements
    by status, a ``workflow:`` step lists the child each attempt started, oldest first
    (not a ``for`` step's: its elements' children are in the history's dispatches).

    Only the fields that apply are set, so the others are left out of its JSON.
    """
    state = scope.state
    unit = state.unit(key)
    fields: dict[str, Json] = _unit_fields(unit)
    if unit.items is not None:
        fields["elements"] = _counts(state, key, len(unit.items))
    compensation = state.units.get(COMPENSATE_PREFIX + key)
    if compensation is not None:
        fields["compensation"] = UnitView(**_unit_fields(compensation))
    running = state.status == "running"
    fields["kind"] = step_kind(step)
    fields["waiting_for"] = _waiting_for(scope, step, key, after) if running else None
    if isinstance(step, CallStep) and step.child is not None and step.for_each is None:
        fields["children"] = child_execution_ids(state.execution_id, key, unit.attempt)
    return StepView(**fields)


def execution_waiting_for(steps: Mapping[str, StepView]) -> list[StepWait]:
    """What the execution waits for: each step's reason, those waiting on other steps left out.

    A step behind others is not why the execution is stuck; the steps it waits
    for are, and they are listed themselves.
    """
    return [
        StepWait(step=step_id, **view.waiting_for.model_dump(exclude_unset=True))
        for step_id, view in steps.items()
        if view.waiting_for is not None and view.waiting_for.kind != "dependencies"
    ]


def history_view(
    state: ExecutionState, ir: WorkflowIR, workers: Workers | None = None
) -> HistoryView:
    """The parts of an execution's view its history decides: ``steps`` (see
    :func:`steps_view`), the execution's ``waiting_for`` and its ``lost_messages``."""
    steps = steps_view(state, ir, workers)
    return HistoryView(
        steps=steps,
        waiting_for=execution_waiting_for(steps),
        lost_messages=lost_messages_view(state),
    )


def lost_messages_view(state: ExecutionState) -> list[LostMessageView]:
    """Messages for the execution that a queue parked, so never acted on (a signal, a
    timer's firing, a cancel): each ``{message_type, queue, reason, detail}``."""
    return [LostMessageView(**lost.model_dump()) for lost in state.lost_messages]


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
class _ViewScope:
    """What every step's reason is read from."""

    state: ExecutionState
    ir: WorkflowIR
    workers: Workers


def _waiting_for(
    scope: _ViewScope, step: CallStep | AwaitStep | SleepStep, key: str, after: tuple[str, ...]
) -> WaitingFor | None:
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
        return WaitsForDependencies(kind="dependencies", steps=blocking) if blocking else None
    if isinstance(step, CallStep) and unit.items is not None:
        return _elements(scope, step, key, len(unit.items))
    if status is UnitStatus.RETRY_WAIT:
        return WaitsForRetry(
            kind="retry",
            attempt=unit.attempt + 1,
            at=iso_ms(unit.due_at),
            last_error=None if unit.error is None else unit.error.code,
        )
    if status is UnitStatus.UNCERTAIN:
        return WaitsForRedelivery(kind="redelivery", attempt=unit.attempt)
    if isinstance(step, AwaitStep):
        return WaitsForSignal(kind="signal", name=step.signal, timeout_at=iso_ms(unit.due_at))
    if isinstance(step, SleepStep):
        return WaitsForTimer(kind="timer", at=iso_ms(unit.due_at))
    if status is UnitStatus.SCHEDULED:
        return WaitsForDispatch(kind="dispatch")
    return _call_wait(scope, step, key, unit)


def _call_wait(
    scope: _ViewScope, step: CallStep, key: str, unit: UnitState
) -> WaitsForChild | WaitsForHttp | WaitsForWorker:
    """What a dispatched call waits for: its child, the HTTP adapter or a worker."""
    if step.child is not None:
        return WaitsForChild(
            kind="child",
            execution_id=child_execution_id(scope.state.execution_id, key, unit.attempt),
            workflow=_task_of(scope.ir, step),
            attempt=unit.attempt,
        )
    if step.call.task == HTTP_TASK:
        return WaitsForHttp(kind="http", attempt=unit.attempt, timeout_at=iso_ms(unit.timeout_at))
    task = _task_of(scope.ir, step)
    return WaitsForWorker(
        kind="worker",
        task=task,
        workers_online=scope.workers.online.get(task, 0),
        held_by=None if unit.token is None else scope.workers.holders.get(unit.token),
        attempt=unit.attempt,
        timeout_at=iso_ms(unit.timeout_at),
    )


def _elements(scope: _ViewScope, step: CallStep, key: str, total: int) -> WaitsForElements:
    """A ``for`` step's wait; a task's also counts live workers and held elements (only
    then are those fields set, so only then sent)."""
    held = 0
    for index in range(total):
        element = scope.state.unit(element_key(key, index))
        if element.token is not None and element.token in scope.workers.holders:
            held += 1
    task = _task_of(scope.ir, step)
    counts = _counts(scope.state, key, total)
    if step.child is None and step.call.task != HTTP_TASK:
        online = scope.workers.online.get(task, 0)
        return WaitsForElements(
            kind="elements", total=total, counts=counts, task=task, workers_online=online, held=held
        )
    return WaitsForElements(kind="elements", total=total, counts=counts, task=task)


def needs_workers(state: ExecutionState) -> bool:
    """Whether a view of the state shows a worker wait (so the sessions are worth reading)."""
    return state.status == "running" and any(
        state.unit(key).status is UnitStatus.DISPATCHED for key in state.index.active
    )


_SHOWS_ERROR = frozenset({UnitStatus.FAILED, UnitStatus.RETRY_WAIT})
"""The statuses whose unit's last error is its current attempt's: a failed unit's, and
that of one waiting to retry. Once a later attempt runs or succeeds, the error
of a past attempt is history (``GET …/history``), not the step's state."""


def _unit_fields(unit: UnitState) -> dict[str, Json]:
    """The fields of :class:`UnitView` a unit has."""
    current = unit.error is not None and unit.status in _SHOWS_ERROR
    return {
        "status": unit.status.value,
        "attempt": unit.attempt,
        "output": unit.output,
        "error": unit.error.model_dump(mode="json") if current and unit.error else None,
    }


def _counts(state: ExecutionState, key: str, total: int) -> dict[str, int]:
    """How many of a ``for`` unit's ``total`` elements are in each status."""
    counts: dict[str, int] = {}
    for index in range(total):
        status = state.unit(element_key(key, index)).status.value
        counts[status] = counts.get(status, 0) + 1
    return counts
