"""The end of an execution whose stored history no longer decodes.

An event whose stored JSON cannot be decoded into its model any more (it nests
deeper than the JSON decoder goes, a field no longer validates, its kind is
unknown) stops every fold of the history at it: nothing can be decided for the
execution again. Rather than leave it running for ever, the decider fails it
with ``HISTORY_UNREADABLE``, from the state folded from the events before the
bad one. Compensation and ``finally`` steps do not run: what succeeded after
that event cannot be known. What a normal failure tells others is still told:
the children it started are cancelled, and a child answers its parent.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pydantic import ValidationError

from orbit_model.children import cancel_child, child_outcome
from orbit_model.events import TaskFailure, WorkflowFailed
from orbit_model.ir import WorkflowIR
from orbit_model.messages import Outgoing
from orbit_model.outcome_codes import OutcomeCode
from orbit_model.state import ExecutionState, evolve
from orbit_model.steps import unit_call
from orbit_model.topology import Topology

MAX_PROBLEM_CHARS = 300
"""How much of a decoding error a failure message quotes: enough to see the cause,
never the stored payload itself."""
_SHOWN_ERRORS = 3


def decode_problem(error: Exception) -> str:
    """Why stored JSON does not decode, in one line cut to :data:`MAX_PROBLEM_CHARS`.

    Pydantic's own text of a validation error quotes the input, which may be
    the whole (huge, or private) payload: only where and what is kept.
    """
    if isinstance(error, ValidationError):
        details = error.errors(include_url=False, include_input=False)
        parts = [_located(detail["loc"], detail["msg"]) for detail in details[:_SHOWN_ERRORS]]
        if len(details) > _SHOWN_ERRORS:
            parts.append(f"and {len(details) - _SHOWN_ERRORS} more")
        text = "; ".join(parts)
    else:
        text = f"{type(error).__name__}: {error}"
    text = " ".join(text.split())  # one line, whatever the error's text holds
    return text if len(text) <= MAX_PROBLEM_CHARS else text[: MAX_PROBLEM_CHARS - 1] + "…"


def _located(loc: tuple[int | str, ...], message: str) -> str:
    """``SignalReceived.payload: …`` (where, in the event); the message alone for the whole."""
    return f"{'.'.join(str(part) for part in loc)}: {message}" if loc else message


def unreadable_failure(seq: int, stored_type: str, problem: str) -> TaskFailure:
    """``HISTORY_UNREADABLE``: event ``seq`` (stored as ``stored_type``) does not decode."""
    return TaskFailure(
        code=OutcomeCode.HISTORY_UNREADABLE,
        message=f"event {seq} ({stored_type}) of its history cannot be decoded: {problem}",
        retryable=False,
    )


@dataclass(frozen=True)
class UnreadableEnd:
    """How an execution with an unreadable history ends.

    Attributes:
        event: The ``WorkflowFailed`` to append after its last stored event.
        state: ``before`` (the state up to the bad event) after ``event``.
        messages: The cancels of the children it started, and for a child the
            answer to its parent.
    """

    event: WorkflowFailed
    state: ExecutionState
    messages: list[Outgoing]


def fail_unreadable(
    before: ExecutionState,
    execution_id: str,
    failure: TaskFailure,
    ir: WorkflowIR | None,
    topology: Topology,
) -> UnreadableEnd:
    """End the execution whose history stops decoding after ``before``, with ``failure``.

    Args:
        before: The state folded from the events before the bad one (empty if
            the first one is bad).
        execution_id: The execution (``before`` may not know it).
        failure: Why (:func:`unreadable_failure`).
        ir: Its definition, to tell child steps from others (None: no child is
            cancelled; each ends alone).
        topology: Where the messages go.
    """
    known = before.model_copy(update={"execution_id": execution_id})
    event = WorkflowFailed(error=failure)
    state = evolve(known, event)
    messages = [cancel_child(state, unit, topology) for unit in _running_children(known, ir)]
    if state.parent_execution_id and state.parent_token:
        # What its tree spent is not known from a readable prefix (a later fan-out, a
        # grandchild started): the parent keeps the whole share.
        messages.append(child_outcome(state, topology, spending_known=False))
    return UnreadableEnd(event, state, messages)


def _running_children(state: ExecutionState, ir: WorkflowIR | None) -> Iterator[str]:
    """The units of ``state`` whose child workflow may still run."""
    if ir is None:
        return
    for key, unit in state.units.items():
        if unit.status.resolved or not unit.tokens:
            continue
        try:
            step, call = unit_call(ir, key)
        except (KeyError, StopIteration):
            continue  # not a call (a sleep, an await, a for step's own record)
        if step.child is not None and call is step.call:
            yield key
