"""The pure core of Orbit: workflow definitions, expressions, contracts and the IR.

Nothing here does I/O, reads a clock or starts a task: every input, the
current time included, is an argument.
"""

from orbit_model.compiler import Definition, compile_definition, definition_from_ir
from orbit_model.contracts import Contract, contract_for
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.expressions import ExecutionInfo, Scope, StepView, evaluate_template
from orbit_model.ir import WorkflowIR
from orbit_model.problems import DefinitionError, Problem

__all__ = [
    "Contract",
    "Definition",
    "DefinitionError",
    "ErrorCode",
    "ExecutionInfo",
    "OrbitError",
    "Problem",
    "Scope",
    "StepView",
    "WorkflowIR",
    "compile_definition",
    "contract_for",
    "definition_from_ir",
    "evaluate_template",
]
