"""The pure core of Orbit: workflow definitions, expressions, contracts and the IR.

Nothing here does I/O, reads a clock or starts a task: every input, the
current time included, is an argument.

The names below are loaded when first used, so that importing one module of
the core (the messages a worker decodes, say) does not load the compiler,
CEL and JSON Schema with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orbit_model.lazy import lazy_attributes

if TYPE_CHECKING:
    from orbit_model.compiler import Definition, compile_definition, definition_from_ir
    from orbit_model.contracts import Contract, contract_for
    from orbit_model.errors import ErrorCode, OrbitError
    from orbit_model.expressions import (
        ExecutionInfo,
        ExpressionScope,
        StepOutcome,
        evaluate_template,
    )
    from orbit_model.ir import WorkflowIR
    from orbit_model.problems import DefinitionError, Problem

_WHERE = {
    "Contract": "contracts",
    "Definition": "compiler",
    "DefinitionError": "problems",
    "ErrorCode": "errors",
    "ExecutionInfo": "expressions",
    "OrbitError": "errors",
    "Problem": "problems",
    "ExpressionScope": "expressions",
    "StepOutcome": "expressions",
    "WorkflowIR": "ir",
    "compile_definition": "compiler",
    "contract_for": "contracts",
    "definition_from_ir": "compiler",
    "evaluate_template": "expressions",
}

__all__ = [
    "Contract",
    "Definition",
    "DefinitionError",
    "ErrorCode",
    "ExecutionInfo",
    "ExpressionScope",
    "OrbitError",
    "Problem",
    "StepOutcome",
    "WorkflowIR",
    "compile_definition",
    "contract_for",
    "definition_from_ir",
    "evaluate_template",
]


__getattr__, __dir__ = lazy_attributes(__name__, _WHERE, globals())
