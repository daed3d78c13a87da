"""The messages committed events call for, and where each goes.

After a decider commits a round, each new dispatch goes to its worker (a
``TaskAssignment`` on the contract's queue, with the attempt's
``traceparent``) or, for a child workflow, to the child (a ``StartChild`` on
the child's partition); a child workflow step cancelled while its child runs
cancels the child; and a child that ended answers its parent. This module
chooses them; the services only encode and publish them.
"""

from __future__ import annotations

from collections.abc import Sequence

from orbit_model.children import cancel_child, child_execution_id, child_outcome
from orbit_model.events import Event, StepAttemptFailed, StepCancelled, StepDispatched
from orbit_model.ir import HTTP_CONTRACT_VERSION, HTTP_TASK, WorkflowIR
from orbit_model.messages import Outgoing, StartChild, TaskAssignment
from orbit_model.outcome_codes import OutcomeCode
from orbit_model.state import ExecutionState
from orbit_model.steps import unit_call
from orbit_model.topology import Topology
from orbit_model.trace_ids import traceparent


def messages_for(
    before: ExecutionState,
    state: ExecutionState,
    ir: WorkflowIR,
    events: Sequence[Event],
    topology: Topology,
) -> list[Outgoing]:
    """What ``events`` (taking ``before`` to ``state``) call for, in their order."""
    messages: list[Outgoing] = []
    for event in events:
        # Still in flight: a token names its unit, so only that unit can hold it.
        if isinstance(event, StepDispatched) and state.unit(event.unit).token == event.token:
            messages.append(_dispatch(state, ir, event, topology))
        elif isinstance(event, StepCancelled) and state.unit(event.unit).tokens:
            if _starts_child(ir, event.unit):
                messages.append(cancel_child(state, event.unit, topology))
        elif (
            isinstance(event, StepAttemptFailed)
            and event.error.code == OutcomeCode.TIMEOUT
            and _starts_child(ir, event.unit)
        ):
            # Its step timeout passed while the child ran: that child is given up on.
            messages.append(cancel_child(state, event.unit, topology, event.attempt))
    if state.terminal and not before.terminal and state.parent_execution_id:
        messages.append(child_outcome(state, topology))
    return messages


def _starts_child(ir: WorkflowIR, key: str) -> bool:
    """Whether the unit ``key`` runs a child workflow (a compensation never does)."""
    step, call = unit_call(ir, key)
    return step.child is not None and call is step.call


def _dispatch(
    state: ExecutionState, ir: WorkflowIR, event: StepDispatched, topology: Topology
) -> Outgoing:
    step, call = unit_call(ir, event.unit)
    unit = state.unit(event.unit)
    if step.child is not None and call is step.call:
        child_id = child_execution_id(state.execution_id, event.unit, event.attempt)
        start = StartChild(
            execution_id=child_id,
            definition_hash=step.child.hash or "",
            input=unit.input,
            parent=f"{state.execution_id}:{event.unit}",
            parent_execution_id=state.execution_id,
            parent_token=event.token,
            root_execution_id=state.trace_root,
            fan_out_budget=event.fan_out_budget,
        )
        return Outgoing(topology.decider_route(child_id), start)
    version = HTTP_CONTRACT_VERSION if call.task == HTTP_TASK else ir.tasks[call.task].version
    assignment = TaskAssignment(
        execution_id=state.execution_id,
        workflow=state.workflow,
        unit=event.unit,
        task=call.task,
        task_version=version,
        token=event.token,
        attempt=event.attempt,
        idempotency_key=state.idempotency_key(event.unit),
        redelivery=event.redelivery,
        input=unit.input,
        result_route=topology.results_route(state.execution_id),
    )
    # The attempt's span (ids derived, orbit_model.trace_ids) parents the worker's.
    span = traceparent(state.trace_root, state.execution_id, event.unit, event.token)
    return Outgoing(topology.task_route(call.task, version), assignment, {"traceparent": span})
