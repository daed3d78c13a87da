"""The fan-out budget of a tree of executions.

``ORBIT_MAX_FAN_OUT`` bounds the ``for`` elements of a top-level execution and
of every child workflow it starts, however deep, all together: a ``for`` over
child workflows that each fan out must not multiply it.

Each execution has a budget: a top-level one the limit, a child the share its
parent gave it (``WorkflowCreated.fan_out_budget``). What it has spent
(``ExecutionState.fan_out_spent``, kept by the fold) grows:

- when a ``for`` step fans out, by its elements; a ``for`` over more than is
  left fails its step with ``LIMIT_EXCEEDED``;
- when a child workflow's unit starts its child, by the share it gives the
  child (``StepDispatched.fan_out_budget``, held by the unit per attempt in
  ``UnitState.fan_out_shares``): what is left, split equally among the
  children starting in that round and the steps still to come that may run
  beside them (a child step or a ``for`` step not started yet, unless it
  comes after one of the children starting: it waits for their answers,
  and with them for what they give back);
- and it shrinks when the child answers, by what the child's tree did not
  use (``StepSucceeded`` / ``StepAttemptFailed`` / ``StaleResultIgnored``
  ``.fan_out_used``: the child's own spending, final once it ended). A child
  given up on (its attempt timed out, its parent stopped) keeps its share
  until it answers: its tree may still be fanning out.

Every execution's own elements and its children's shares stay within its
budget, and each child's tree within its share, so the whole tree stays
within the top-level budget.
"""

from __future__ import annotations

from orbit_model.events import StepDispatched
from orbit_model.ir import WORKFLOW_TASK_PREFIX, CallStep, WorkflowIR
from orbit_model.records import UnitState, UnitStatus
from orbit_model.state import ExecutionState
from orbit_model.units import parse_unit

LIMIT_NOTE = "ORBIT_MAX_FAN_OUT bounds the for elements of a whole tree of workflows"


def fan_out_left(state: ExecutionState, limit: int | None) -> int | None:
    """What the execution may still fan out (None: unbounded); ``limit`` is
    ``ORBIT_MAX_FAN_OUT``, the budget of a top-level execution."""
    budget = state.fan_out_budget if state.fan_out_budget is not None else limit
    return None if budget is None else max(budget - state.fan_out_spent, 0)


def fan_out_refusal(
    state: ExecutionState, limit: int | None, elements: int, taken: int = 0
) -> str | None:
    """Why a ``for`` over ``elements`` may not fan out now, when ``taken`` elements were
    already fanned out in the same round; None: it may."""
    left = fan_out_left(state, limit)
    if left is None or elements <= left - taken:
        return None
    if state.fan_out_budget is None and state.fan_out_spent + taken == 0:
        return f"for over {elements} elements exceeds the fan-out limit of {limit}"
    whose = (
        f"of the {state.fan_out_budget} its parent gave it"
        if state.fan_out_budget is not None
        else f"of the limit of {limit}"
    )
    return (
        f"for over {elements} elements exceeds the fan-out left to this execution:"
        f" {max(left - taken, 0)} {whose} ({LIMIT_NOTE})"
    )


def starts_child(call_task: str) -> bool:
    """Whether a call of ``call_task`` starts a child workflow."""
    return call_task.startswith(WORKFLOW_TASK_PREFIX)


def child_share(state: ExecutionState, ir: WorkflowIR, limit: int | None) -> int | None:
    """The budget each child workflow started in this round gets (None: unbounded).

    What is left is split equally among the child units about to start a child (a
    first attempt or a retry) and the steps to come that may run beside them
    (:func:`_claims_to_come`), so that a child does not leave them nothing.
    """
    left = fan_out_left(state, limit)
    if left is None:
        return None
    starting = [
        key
        for key in state.reactive_units()
        if _starts_a_child_now(state.unit(key)) and _child_unit(ir, key)
    ]
    claims = len(starting) + _claims_to_come(state, ir, {parse_unit(k).step for k in starting})
    return left // max(claims, 1)


def with_share(state: ExecutionState, event: StepDispatched, share: int | None) -> StepDispatched:
    """A child unit's dispatch with the budget its child gets: ``share``, or for a
    redelivery (the same child, started again) the share it already holds."""
    held = state.unit(event.unit).fan_out_shares.get(event.attempt)
    budget = held if event.redelivery and held is not None else share
    return event.model_copy(update={"fan_out_budget": budget})


def _starts_a_child_now(unit: UnitState) -> bool:
    return unit.status is UnitStatus.SCHEDULED or (
        unit.status is UnitStatus.RETRY_WAIT and unit.timer_fired
    )


def _child_unit(ir: WorkflowIR, key: str) -> bool:
    """Whether the unit ``key`` starts a child: a call of a child workflow in any role
    (a step, a ``for`` element, a compensation, a cleanup step), but a ``for`` step's
    own unit, which only holds its elements."""
    parsed = parse_unit(key)
    if parsed.role == "finally":
        step: object = next((s for s in ir.finally_steps if s.id == parsed.step), None)
    else:
        step = ir.step(parsed.step)
    if not isinstance(step, CallStep):
        return False
    if parsed.role == "compensate":
        return step.compensate is not None and starts_child(step.compensate.call.task)
    if parsed.role == "step" and step.for_each is not None:
        return False
    return starts_child(step.call.task)


def _claims_to_come(state: ExecutionState, ir: WorkflowIR, starting: set[str]) -> int:
    """The main steps not started yet that will spend from the budget (a ``for`` step, a
    child step) and may start while the children of the ``starting`` steps run: not one
    that comes after them, which starts once they have answered and given back what they
    did not use. (``finally`` steps start no children, and run once no child does.)"""
    waiting = _after_any(ir, starting)
    return sum(
        1
        for step in ir.steps
        if isinstance(step, CallStep)
        and (step.for_each is not None or step.child is not None)
        and step.id not in waiting
        and step.id not in starting
        and state.unit(step.id).status is UnitStatus.PENDING
    )


def _after_any(ir: WorkflowIR, steps: set[str]) -> set[str]:
    """The main steps that come after any of ``steps``, directly or through others."""
    later: dict[str, list[str]] = {}
    for step in ir.steps:
        for earlier in step.after:
            later.setdefault(earlier, []).append(step.id)
    found: set[str] = set()
    todo = list(steps)
    while todo:
        for step_id in later.get(todo.pop(), ()):
            if step_id not in found:
                found.add(step_id)
                todo.append(step_id)
    return found
