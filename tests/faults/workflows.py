"""Workflows the fault tests run, and the tasks that serve them in the test's process."""

from typing import Any

from orbit_model import compile_definition
from orbit_sdk import TaskContext, task

THREE_STEPS_YAML = """
orbit: 1
workflow: three-steps
version: 1.0.0
tasks:
  greet: {version: "1"}
steps:
  - id: a
    task: greet
    input: {name: "${ input.name }"}
  - id: b
    task: greet
    input: {name: "${ steps.a.output.greeting }"}
  - id: c
    task: greet
    input: {name: "${ steps.b.output.greeting }"}
"""

THREE_STEPS = compile_definition(THREE_STEPS_YAML)

ONE_STEP_YAML = """
orbit: 1
workflow: one-step
version: 1.0.0
tasks:
  echo: {version: "1"}
steps:
  - id: a
    task: echo
    input: ${ input }
output: ${ steps.a.output }
"""


@task("echo", version="1")
async def echo(inp: Any, ctx: TaskContext) -> Any:
    """one-step's task: its input, as it came."""
    return inp


@task("greet", version="1")
async def greet(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    """three-steps' task."""
    return {"greeting": f"hi {inp['name']}"[:40]}
