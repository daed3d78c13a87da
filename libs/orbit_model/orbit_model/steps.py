"""What a unit calls, and what expressions see of an execution's steps.

Shared by the decider's rounds, the queries, the outgoing messages and the
services' counters: the call a unit makes (a step's, or its compensation's)
and the ``steps``/``signals``/``execution`` scope of an expression.
"""

from __future__ import annotations

from typing import Any

from orbit_model.errors import ErrorCode
from orbit_model.events import TaskFailure
from orbit_model.expressions import ExecutionInfo, Scope, StepView
from orbit_model.ir import CallStep, Step, TaskCall, WorkflowIR
from orbit_model.state import ExecutionState, UnitState, UnitStatus
from orbit_model.units import FINALLY_PREFIX, parse_unit


def failure(
    code: ErrorCode | str, message: str, retryable: bool = False, details: Any = None
) -> TaskFailure:
    """An Orbit error as a value."""
    return TaskFailure(code=str(code), message=message, retryable=retryable, details=details)


def unit_call(definition: WorkflowIR, key: str) -> tuple[CallStep, TaskCall]:
    """The step a call unit belongs to and the call it makes (its compensation's, for
    ``compensate:`` units).

    Raises:
        KeyError: ``key`` names no call of the definition.
    """
    parsed = parse_unit(key)
    if parsed.role == "finally":
        step: Step = next(s for s in definition.finally_steps if s.id == parsed.step)
    else:
        step = definition.step(parsed.step)
    if not isinstance(step, CallStep):
        raise KeyError(key)
    if parsed.role == "compensate":
        if step.compensate is None:
            raise KeyError(key)
        return step, step.compensate.call
    return step, step.call


def step_views(state: ExecutionState, definition: WorkflowIR) -> dict[str, StepView]:
    """``steps.<id>`` as expressions see it (``finally`` steps under their own id)."""
    views: dict[str, StepView] = {}
    for step in definition.steps:
        views[step.id] = _view(state.unit(step.id), step)
    for step in definition.finally_steps:
        views[step.id] = _view(state.unit(FINALLY_PREFIX + step.id), step)
    return views


def scope_of(
    state: ExecutionState,
    definition: WorkflowIR,
    item: Any = None,
    index: int | None = None,
    attempt: int | None = None,
) -> Scope:
    """What an expression sees of an execution: ``signals.X`` is the last payload of X."""
    return Scope(
        input=state.input,
        steps=step_views(state, definition),
        signals=dict(state.index.last_payloads),
        execution=ExecutionInfo(
            id=state.execution_id, workflow=state.workflow, version=state.version, attempt=attempt
        ),
        item=item,
        index=index,
    )


def _view(unit: UnitState, step: Step) -> StepView:
    if unit.status is UnitStatus.SUCCEEDED:
        return StepView(status=unit.status.value, output=unit.output)
    if unit.status is UnitStatus.FAILED and step.continue_on_error and unit.error is not None:
        return StepView(status=unit.status.value, output={"error": unit.error.model_dump()})
    return StepView(status=unit.status.value)
