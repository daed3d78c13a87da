"""Queries: a definition's named expressions, read against an execution's state.

A query reads the state its next decider turn reaches from what is stored
(:func:`projected`): a signal whose write was acknowledged is in the history,
but the ``await`` step that takes it only does so at the decider's next turn.
Read on the stored state alone, a query sent right after the signal's answer
could miss it; read on the projection, it sees what the decider will make of
it, from any gateway.
"""

from __future__ import annotations

from typing import Any

from orbit_model.decider import DecisionLoopError
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.expressions import evaluate_template
from orbit_model.ir import WorkflowIR
from orbit_model.payloads import DEFAULT_MAX_DEPTH, payload_problem, payload_size
from orbit_model.plan import Policy, decide_answering
from orbit_model.state import ExecutionState
from orbit_model.steps import scope_of


def evaluate_query(state: ExecutionState, definition: WorkflowIR, name: str) -> Any:
    """The query's value now; steps not yet done read as null.

    Raises:
        OrbitError: ``UNKNOWN_QUERY``; ``EXPRESSION_LIMIT`` past the expression's
            budget; ``QUERY_FAILED`` when evaluation fails otherwise.
    """
    query = definition.queries.get(name)
    if query is None:
        known = ", ".join(sorted(definition.queries)) or "none"
        raise OrbitError(
            ErrorCode.UNKNOWN_QUERY, f"{definition.name} has no query {name!r} (it has: {known})"
        )
    try:
        return evaluate_template(query, scope_of(state, definition))
    except OrbitError as error:
        code = error.code if error.code is ErrorCode.EXPRESSION_LIMIT else ErrorCode.QUERY_FAILED
        raise OrbitError(code, f"query {name!r}: {error.message}") from None


def answer_query(
    state: ExecutionState,
    definition: WorkflowIR,
    name: str,
    *,
    now: int,
    policy: Policy,
    max_bytes: int | None,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> Any:
    """The query's value on the :func:`projected` state, checked as a payload is.

    CPU work only (the decider's turn, the expression): a gateway runs it off its
    event loop.

    Raises:
        OrbitError: As :func:`evaluate_query`; ``QUERY_FAILED`` for a value nested
            deeper than ``max_depth``; ``EXPRESSION_LIMIT`` for one larger than
            ``max_bytes`` (``ORBIT_MAX_PAYLOAD_BYTES``).
    """
    value = evaluate_query(projected(state, definition, now, policy), definition, name)
    # An expression can nest what it reads deeper than any stored value may be, and
    # make a value larger than any payload a client may send or a task return.
    problem = payload_problem(value, max_depth=max_depth)
    if problem is not None:
        raise OrbitError(ErrorCode.QUERY_FAILED, f"the value of query {name!r} {problem}")
    if max_bytes is not None and (size := payload_size(value)) > max_bytes:
        raise OrbitError(
            ErrorCode.EXPRESSION_LIMIT,
            f"the value of query {name!r} is {size} bytes; the limit is "
            f"{max_bytes} (ORBIT_MAX_PAYLOAD_BYTES)",
        )
    return value


def projected(
    state: ExecutionState, definition: WorkflowIR, now: int, policy: Policy
) -> ExecutionState:
    """``state`` with the decisions of its next turn applied: what a query reads.

    The decisions are not stored; the decider makes them (the same ones, given the
    same stored events, :func:`orbit_model.plan.decide_answering`) when it next takes
    the execution. A decision loop, a decider bug the decider itself reports, leaves
    the stored state as it is.
    """
    if state.terminal:
        return state
    try:
        projection, _ = decide_answering(state, definition, now, policy)
    except DecisionLoopError:
        return state
    return projection
