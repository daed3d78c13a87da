"""Workflows the fault tests run."""

from orbit_model import compile_definition

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
