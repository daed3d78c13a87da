"""Child workflows: their ids, their start, their outcome and their cancellation.

A parent's ``workflow:`` unit starts its child with a ``StartChild`` to the
child's partition; the child's id is derived from the parent's id, the unit
and the attempt (``order-7:invoice``, ``order-7:invoice:attempt-2``), so a
start sent again finds the child it started, and a retry starts a new one. A
child that ends answers its parent with a ``TaskResult`` (its output, or
``CHILD_FAILED``); a parent that stops while its child runs, or whose attempt
timed out, sends a ``CancelChild``. A cancel that overtakes the start finds no child; the
start then sees that its parent no longer waits (:func:`parent_waits`) and
creates the child cancelled.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel, JsonValue

from orbit_model.attempts import child_secret
from orbit_model.compiler import Definition
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.events import Event, ParentReattached, TaskFailure
from orbit_model.inputs import start_execution
from orbit_model.ir import CallStep, WorkflowIR
from orbit_model.messages import CancelChild, Outgoing, StartChild, TaskResult
from orbit_model.outcome_codes import OutcomeCode
from orbit_model.state import ExecutionState, evolve, replay
from orbit_model.topology import Topology

_UNSAFE_ID_CHARACTERS = re.compile(r"[^A-Za-z0-9\-_.:]")


def child_execution_id(parent_id: str, unit: str, attempt: int = 1) -> str:
    """The id of the child that attempt ``attempt`` of a parent's unit starts.

    The first attempt's child is ``PARENT:UNIT`` (``order-7:invoice``); a retry's is
    ``PARENT:UNIT:attempt-N``, a new execution, as a failed child is not run again
    under its own id. A redelivery of one attempt names the same child.
    """
    suffix = "" if attempt == 1 else f":attempt-{attempt}"
    candidate = _UNSAFE_ID_CHARACTERS.sub(".", f"{parent_id}:{unit}").rstrip(".") + suffix
    if len(candidate) <= 200:
        return candidate
    # The first attempt's digest is the one child ids had before retries ran new children.
    named = f"{parent_id}\0{unit}" if attempt == 1 else f"{parent_id}\0{unit}\0{attempt}"
    digest = hashlib.sha256(named.encode()).hexdigest()[:40]
    return f"{candidate[:150]}:{digest}"


def child_execution_ids(parent_id: str, unit: str, attempts: int) -> list[str]:
    """The ids of the children attempts 1 to ``attempts`` of the unit started, in order."""
    return [child_execution_id(parent_id, unit, n) for n in range(1, attempts + 1)]


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
            fan_out_budget=start.fan_out_budget,
        )
    except OrbitError as error:
        failure = TaskFailure(code=error.code, message=error.message, retryable=False)
        return ChildStart(state, [], [answer_parent(start, failure, topology)])
    return ChildStart(replay([created]), [created], [])


def parent_waits(parent: ExecutionState | None, start: StartChild) -> bool:
    """Whether the parent still waits for the child ``start`` creates.

    It does not once it has ended, or once the attempt that starts the child is
    over: its step was resolved (cancelled as the parent stops), or the attempt
    timed out and the step waits to retry or runs a later attempt, whose child is
    another. The ``CancelChild`` the parent sent then found no child and was
    dropped, so the new child is created cancelled. An unknown parent (None, or
    a token it does not know) is taken to wait.
    """
    if parent is None or parent.last_seq == 0:
        return True
    if parent.terminal:
        return False
    key = parent.unit_of_token(start.parent_token)
    return key is None or parent.unit(key).token == start.parent_token


def _existing_child(state: ExecutionState, start: StartChild, topology: Topology) -> ChildStart:
    if (state.parent_execution_id, state.parent) != (start.parent_execution_id, start.parent):
        # Ids are chosen by users too: an execution that is not this parent's
        # child is never taken for it, answered for it, or cancelled by it.
        failure = TaskFailure(
            code=OutcomeCode.CHILD_ID_TAKEN,
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


def cancel_child(
    state: ExecutionState, unit: str, topology: Topology, timed_out_attempt: int | None = None
) -> Outgoing:
    """Cancel a child ``unit`` of ``state`` started: that of its last attempt, as the
    parent stops; or that of ``timed_out_attempt``, whose step timeout passed (the
    retry starts a child of its own)."""
    if timed_out_attempt is None:
        attempt = max(state.unit(unit).attempt, 1)
        reason = f"its parent {state.execution_id} is stopping"
    else:
        attempt = timed_out_attempt
        reason = f"attempt {attempt} of step {unit} of its parent {state.execution_id} timed out"
    child_id = child_execution_id(state.execution_id, unit, attempt)
    cancel = CancelChild(
        execution_id=child_id, parent_execution_id=state.execution_id, reason=reason
    )
    return Outgoing(topology.decider_route(child_id), cancel)


def child_outcome(
    state: ExecutionState, topology: Topology, *, spending_known: bool = True
) -> Outgoing:
    """The ended child ``state``'s answer to its parent: its output, or ``CHILD_FAILED``.

    It says what the child's tree spent of its fan-out budget, unless
    ``spending_known`` is false (then the parent keeps the child's whole share).

    ``CHILD_FAILED`` has the child's id and status in its ``details`` and the
    child's own error as its ``cause``. It is retryable (by the parent step's
    ``retry``, as a new child) when the child timed out, or failed with an error
    that says trying again may help (:func:`_worth_retrying`); not when it was
    cancelled: someone stopped it.

    Raises:
        ValueError: ``state`` is not a child's.
    """
    parent_id, parent_token = state.parent_execution_id, state.parent_token
    if parent_id is None or parent_token is None:
        raise ValueError(f"{state.execution_id} is not a child execution")
    # Its tree's spending: the rest of its share goes back to its parent (unless not known).
    used = state.fan_out_spent if spending_known else None
    if state.status == "completed":
        result = TaskResult(
            execution_id=parent_id, token=parent_token, output=state.output, fan_out_used=used
        )
    else:
        error = state.error
        reason = f": {error.message}" if error else ""
        result = TaskResult(
            execution_id=parent_id,
            token=parent_token,
            error=TaskFailure(
                code=OutcomeCode.CHILD_FAILED,
                message=f"child workflow {state.execution_id} {state.status}{reason}",
                retryable=_worth_retrying(state),
                details={
                    "child_execution_id": state.execution_id,
                    "status": state.status,
                    # As before the cause chain, for the clients that read it here; its
                    # own causes only under ``cause``, not twice at every level.
                    "error": None if error is None else _without_chain(error),
                },
                cause=None if error is None else error.caused_by(execution_id=state.execution_id),
            ),
            fan_out_used=used,
        )
    return Outgoing(topology.decider_route(parent_id), result)


def _without_chain(error: TaskFailure) -> JsonValue:
    return error.model_copy(update={"cause": None}).model_dump(mode="json")


def _worth_retrying(child: ExecutionState) -> bool:
    """Whether a new child might end otherwise than this one, which did not complete.

    Not after a cancel. After a timeout, yes. After a failure, as its innermost error
    says: a task that said trying again cannot help (``retryable: false``), or Orbit's
    own verdict (a broken output contract, a limit, a history that cannot be read), fails
    a new child the same way; a task that ran out of its own attempts may yet succeed.
    """
    if child.status == "cancelled":
        return False
    if child.error is None:
        return True
    return child.error.chain()[-1].retryable


def answer_parent(start: StartChild, failure: TaskFailure, topology: Topology) -> Outgoing:
    """A child that could not start fails its parent's step with ``failure``."""
    result = TaskResult(
        execution_id=start.parent_execution_id,
        token=start.parent_token,
        error=failure,
        fan_out_used=0,  # no child: its whole share goes back
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
