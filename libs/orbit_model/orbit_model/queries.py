"""Queries: a definition's named expressions, read against an execution's state."""

from __future__ import annotations

from typing import Any

from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.expressions import evaluate_template
from orbit_model.ir import WorkflowIR
from orbit_model.state import ExecutionState
from orbit_model.steps import scope_of


def evaluate_query(state: ExecutionState, definition: WorkflowIR, name: str) -> Any:
    """The query's value now; steps not yet done read as null.

    Raises:
        OrbitError: ``UNKNOWN_QUERY``, or ``QUERY_FAILED`` when evaluation fails.
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
        raise OrbitError(ErrorCode.QUERY_FAILED, f"query {name!r}: {error.message}") from None
