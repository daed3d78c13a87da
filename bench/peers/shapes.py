"""The workloads every system runs, and what each must answer: shared by Orbit's side
and the peers' programs, so this module imports nothing but the standard library.

- **W1**: ``executions`` x 3 sequential ``inc`` steps, started by ``CALLERS``
  client threads (or tasks), each starting one and waiting for its end before the
  next: throughput in steps/s.
- **W2**: ``executions`` x (a fan-out of 20 ``inc`` units joined by one ``sum``),
  started the same way: 21 steps each.
- **W3**: ``runs`` executions of 10 sequential ``inc`` steps, one at a time: the
  client's round trip (start → the ended execution's output) / 10.
"""

from __future__ import annotations

CALLERS = 16
W1_STEPS = 3
W2_WIDTH = 20
W3_STEPS = 10

SIZES = {"W1": 500, "W2": 50, "W3": 20}
QUICK = {"W1": 100, "W2": 10, "W3": 5}


def sequential_output(value: int, steps: int) -> int:
    """What ``steps`` sequential ``inc`` steps make of ``value``."""
    return value + steps


def fan_out_input(index: int) -> list[int]:
    return [index * 100 + k for k in range(W2_WIDTH)]


def fan_out_total(index: int) -> int:
    """The ``sum`` of the fan-out's units, each ``inc`` of its number."""
    return sum(n + 1 for n in fan_out_input(index))


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]
