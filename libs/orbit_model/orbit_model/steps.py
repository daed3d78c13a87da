"""What a unit calls, and what expressions see of an execution's steps.

Shared by the decider's rounds, the queries, the outgoing messages and the
services' counters: the call a unit makes (a step's, or its compensation's)
and the ``steps``/``signals``/``execution`` scope of an expression.
"""

from __future__ import annotations

from typing import Any

from orbit_model.events import TaskFailure
from orbit_model.expressions import ExecutionInfo, ExpressionScope, StepOutcome
from orbit_model.ir import CallStep, Step, TaskCall, WorkflowIR
from orbit_model.outcome_codes import OutcomeCode
from orbit_model.state import ExecutionState, UnitState, UnitStatus
from orbit_model.units import FINALLY_PREFIX, parse_unit


def failure(
    code: OutcomeCode | str, message: str, retryable: bool = False, details: Any = None
) -> TaskFailure:
    """How a step or an execution ended, as a value (``code``: an :class:`OutcomeCode`,
    or the code of the error that ended it)."""
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


def step_views(state: ExecutionState, definition: WorkflowIR) -> dict[str, StepOutcome]:
    """``steps.<id>`` as expressions see it (``finally`` steps under their own id)."""
    views: dict[str, StepOutcome] = {}
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
) -> ExpressionScope:
    """What an expression sees of an execution: ``signals.X`` is the last payload of X."""
    return ExpressionScope(
        input=state.input,
        steps=step_views(state, definition),
        signals=dict(state.index.last_payloads),
        execution=ExecutionInfo(
            id=state.execution_id, workflow=state.workflow, version=state.version, attempt=attempt
        ),
        item=item,
        index=index,
    )


def _view(unit: UnitState, step: Step) -> StepOutcome:
    if unit.status is UnitStatus.SUCCEEDED:
        return StepOutcome(status=unit.status.value, output=unit.output)
    if unit.status is UnitStatus.FAILED and step.continue_on_error and unit.error is not None:
        return StepOutcome(status=unit.status.value, output={"error": unit.error.model_dump()})
    return StepOutcome(status=unit.status.value)
