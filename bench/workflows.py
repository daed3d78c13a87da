"""The benchmark's workflows (YAML, deployed through the gateway) and what each must return."""

from __future__ import annotations

from typing import Any

_INC_CONTRACT = """
  inc:
    version: "1"
    input: {type: object, required: [value], properties: {value: {type: integer}}}
    output: {type: object, required: [value], properties: {value: {type: integer}}}
"""


def sequential(name: str, steps: int) -> str:
    """``steps`` no-op tasks one after another, each adding 1 to the value."""
    lines = [
        "orbit: 1",
        f"workflow: {name}",
        "version: 1.0.0",
        "input: {type: object, required: [value], properties: {value: {type: integer}}}",
        "tasks:" + _INC_CONTRACT.rstrip(),
        "defaults:",
        "  timeout: 120s",
        "steps:",
    ]
    previous = "input.value"
    for number in range(1, steps + 1):
        lines += [
            f"  - id: s{number}",
            "    task: inc",
            f"    input: {{value: '${{ {previous} }}'}}",
        ]
        previous = f"steps.s{number}.output.value"
    lines += ["output:", f"  value: ${{ {previous} }}"]
    return "\n".join(lines) + "\n"


FAN_OUT = (
    """orbit: 1
workflow: bench-fan-out
version: 1.0.0
input:
  type: object
  required: [numbers]
  properties: {numbers: {type: array, items: {type: integer}}}
tasks:"""
    + _INC_CONTRACT.rstrip()
    + """
  sum:
    version: "1"
    input: {type: object, required: [values], properties: {values: {type: array}}}
    output: {type: object, required: [total], properties: {total: {type: integer}}}
defaults:
  timeout: 120s
steps:
  - id: each
    for: ${ input.numbers }
    concurrency: 1000
    task: inc
    input: {value: '${ item }'}
  - id: total
    task: sum
    input:
      values: ${ steps.each.output.map(s, s.value) }
output:
  count: ${ size(steps.each.output) }
  total: ${ steps.total.output.total }
"""
)

WAIT_SIGNAL = (
    """orbit: 1
workflow: bench-wait
version: 1.0.0
input: {type: object, required: [value], properties: {value: {type: integer}}}
signals:
  go: {type: object, required: [value], properties: {value: {type: integer}}}
tasks:"""
    + _INC_CONTRACT.rstrip()
    + """
steps:
  - id: go
    await: go
  - id: bump
    task: inc
    timeout: 120s
    input: {value: '${ steps.go.output.value }'}
output:
  value: ${ steps.bump.output.value }
"""
)

W1_STEPS = 3
W3_STEPS = 10
W2_WIDTH = 20

DEFINITIONS = {
    "bench-seq3": sequential("bench-seq3", W1_STEPS),
    "bench-seq10": sequential("bench-seq10", W3_STEPS),
    "bench-fan-out": FAN_OUT,
    "bench-wait": WAIT_SIGNAL,
}

# Every task contract the workflows name: their queues are deleted at the end.
TASKS = (("inc", "1"), ("sum", "1"))


def expected_sequential(value: int, steps: int) -> dict[str, Any]:
    return {"value": value + steps}


def fan_out_input(index: int) -> list[int]:
    return [index * 100 + k for k in range(W2_WIDTH)]


def expected_fan_out(index: int) -> dict[str, Any]:
    numbers = fan_out_input(index)
    return {"count": W2_WIDTH, "total": sum(n + 1 for n in numbers)}
