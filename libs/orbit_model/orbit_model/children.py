"""Child workflows: their ids, their start, their outcome and their cancellation.

A parent's ``workflow:`` unit starts its child with a ``StartChild`` to the
child's partition; the child's id is derived from the parent's id and unit
(``order-7:invoice``), so a retried start of the same unit finds the child it
started before. A child that ends answers its parent with a ``TaskResult``
(its output, or ``CHILD_FAILED``); a parent that stops while its child runs
sends a ``CancelChild``. A cancel that overtakes the start finds no child; the
start then sees that its parent no longer waits (:func:`parent_waits`) and
creates the child cancelled.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel

from orbit_model.attempts import child_secret
from orbit_model.compiler import Definition
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.events import Event, ParentReattached, TaskFailure
from orbit_model.inputs import start_execution
from orbit_model.ir import CallStep, WorkflowIR
from orbit_model.messages import CancelChild, Outgoing, StartChild, TaskResult
from orbit_model.state import ExecutionState, evolve, replay
from orbit_model.topology import Topology

_UNSAFE_ID_CHARACTERS = re.compile(r"[^A-Za-z0-9\-_.:]")


def child_execution_id(parent_id: str, unit: str) -> str:
    """The id of the child a parent's unit starts: the same for every attempt of that unit."""
    candidate = _UNSAFE_ID_CHARACTERS.sub(".", f"{parent_id}:{unit}").rstrip(".")
    if len(candidate) <= 200:
        return candidate
    digest = hashlib.sha256(f"{parent_id}\0{unit}".encode()).hexdigest()[:40]
    return f"{candidate[:150]}:{digest}"


@dataclass(frozen=True)
class ChildStart:
    """What a ``StartChild`` does to the execution it names.

    Attributes:
        state: The child's state after it (unchanged but for a new child).
        events: The child's ``WorkflowCreated``, or a ``ParentReattached``; or none.
        answers: Messages to the parent: the outcome of a child that already
            ended, or why it cannot start.
    """

    state: ExecutionState
    events: list[Event]
    answers: list[Outgoing]


def start_child(
    state: ExecutionState, start: StartChild, child: WorkflowIR | None, topology: Topology
) -> ChildStart:
    """Create the child ``start`` names, unless it exists; ``child`` is its definition
    (None: not registered). A child that already ended answers its parent again."""
    if state.last_seq > 0:
        return _existing_child(state, start, topology)
    if child is None:
        failure = TaskFailure(
            code=ErrorCode.CHILD_NOT_REGISTERED,
            message=f"the child definition {start.definition_hash} is not registered",
            retryable=False,
        )
        return ChildStart(state, [], [answer_parent(start, failure, topology)])
    try:
        created = start_execution(
            child,
            start.definition_hash,
            start.execution_id,
            start.input,
            parent=start.parent,
            parent_execution_id=start.parent_execution_id,
            parent_token=start.parent_token,
            root_execution_id=start.root_execution_id,
            delivery_secret=child_secret(start.parent_token),
        )
    except OrbitError as error:
        failure = TaskFailure(code=error.code, message=error.message, retryable=False)
        return ChildStart(state, [], [answer_parent(start, failure, topology)])
    return ChildStart(replay([created]), [created], [])


def parent_waits(parent: ExecutionState | None, start: StartChild) -> bool:
    """Whether the parent still waits for the child ``start`` creates.

    It does not once it has ended, or once the step that starts the child is
    resolved (cancelled as the parent stops): the ``CancelChild`` it sent then
    found no child and was dropped, so the new child is created cancelled. A
    step that only moved on to a later attempt (its attempt timed out, it waits
    to retry) still waits: the retry's start reattaches the child. An unknown
    parent (None, or a token it does not know) is taken to wait.
    """
    if parent is None or parent.last_seq == 0:
        return True
    if parent.terminal:
        return False
    key = parent.unit_of_token(start.parent_token)
    return key is None or not parent.unit(key).status.resolved


def _existing_child(state: ExecutionState, start: StartChild, topology: Topology) -> ChildStart:
    if (state.parent_execution_id, state.parent) != (start.parent_execution_id, start.parent):
        # Ids are chosen by users too: an execution that is not this parent's
        # child is never taken for it, answered for it, or cancelled by it.
        failure = TaskFailure(
            code=ErrorCode.CHILD_ID_TAKEN,
            message=f"the child id {start.execution_id} is taken by another execution",
            retryable=False,
        )
        return ChildStart(state, [], [answer_parent(start, failure, topology)])
    if state.terminal:
        answered = state.model_copy(update={"parent_token": start.parent_token})
        return ChildStart(state, [], [child_outcome(answered, topology)])
    if state.parent_token != start.parent_token:
        # The parent retried its step: the child's outcome goes to the new delivery.
        reattached = ParentReattached(parent_token=start.parent_token)
        return ChildStart(evolve(state, reattached), [reattached], [])
    return ChildStart(state, [], [])


def cancel_applies(state: ExecutionState, cancel: CancelChild) -> bool:
    """Whether ``cancel`` stops ``state``: it must be a running child of that parent."""
    return not state.terminal and state.parent_execution_id == cancel.parent_execution_id


def cancel_child(state: ExecutionState, unit: str, topology: Topology) -> Outgoing:
    """Cancel the child that ``unit`` of ``state`` started (its parent is stopping)."""
    child_id = child_execution_id(state.execution_id, unit)
    cancel = CancelChild(
        execution_id=child_id,
        parent_execution_id=state.execution_id,
        reason=f"its parent {state.execution_id} is stopping",
    )
    return Outgoing(topology.decider_route(child_id), cancel)


def child_outcome(state: ExecutionState, topology: Topology) -> Outgoing:
    """The ended child ``state``'s answer to its parent: its output, or ``CHILD_FAILED``.

    Raises:
        ValueError: ``state`` is not a child's.
    """
    parent_id, parent_token = state.parent_execution_id, state.parent_token
    if parent_id is None or parent_token is None:
        raise ValueError(f"{state.execution_id} is not a child execution")
    if state.status == "completed":
        result = TaskResult(execution_id=parent_id, token=parent_token, output=state.output)
    else:
        reason = f": {state.error.message}" if state.error else ""
        result = TaskResult(
            execution_id=parent_id,
            token=parent_token,
            error=TaskFailure(
                code=ErrorCode.CHILD_FAILED,
                message=f"child workflow {state.execution_id} {state.status}{reason}",
                retryable=False,
                details={
                    "child_execution_id": state.execution_id,
                    "status": state.status,
                    "error": state.error.model_dump(mode="json") if state.error else None,
                },
            ),
        )
    return Outgoing(topology.decider_route(parent_id), result)


def answer_parent(start: StartChild, failure: TaskFailure, topology: Topology) -> Outgoing:
    """A child that could not start fails its parent's step with ``failure``."""
    result = TaskResult(
        execution_id=start.parent_execution_id, token=start.parent_token, error=failure
    )
    return Outgoing(topology.decider_route(start.parent_execution_id), result)


_Step = TypeVar("_Step", bound=BaseModel)


def children_of(definition: Definition) -> set[tuple[str, str]]:
    """The ``(name, version)`` of every child workflow ``definition`` starts."""
    ir = definition.ir
    return {
        (step.child.name, step.child.version)
        for step in (*ir.steps, *ir.finally_steps)
        if isinstance(step, CallStep) and step.child is not None
    }


def pin_children(
    definition: Definition, registered: Mapping[tuple[str, str], Definition]
) -> Definition:
    """``definition`` with each child step pinned to the hash of the registered child.

    ``registered`` holds the registered definitions of :func:`children_of`. Child
    hashes are left out of the definition hash, so pinning keeps it.

    Raises:
        OrbitError: ``CHILD_NOT_REGISTERED`` for a child that is not registered,
            or not at the hash the step pins.
    """
    ir = definition.ir
    steps = tuple(_pinned(ir, step, registered) for step in ir.steps)
    finally_steps = tuple(_pinned(ir, step, registered) for step in ir.finally_steps)
    pinned = ir.model_copy(update={"steps": steps, "finally_steps": finally_steps})
    return Definition(ir=pinned, hash=definition.hash)


def _pinned(ir: WorkflowIR, step: _Step, registered: Mapping[tuple[str, str], Definition]) -> _Step:
    if not isinstance(step, CallStep) or step.child is None:
        return step
    child = step.child
    found = registered.get((child.name, child.version))
    if found is None:
        raise OrbitError(
            ErrorCode.CHILD_NOT_REGISTERED,
            f"{ir.name}@{ir.version} starts child workflow {child.name}@{child.version}"
            f" (step {step.id}), which is not registered; register the child first"
            " (`orbit deploy` does this automatically)",
        )
    if child.hash is not None and child.hash != found.hash:
        raise OrbitError(
            ErrorCode.CHILD_NOT_REGISTERED,
            f"{ir.name}@{ir.version} pins child workflow {child.name}@{child.version} at"
            f" {child.hash}, but the registered one is {found.hash}",
        )
    return step.model_copy(update={"child": child.model_copy(update={"hash": found.hash})})
