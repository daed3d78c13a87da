"""The decider's step clock: counts committed events, times attempts, forgets finished ones."""

from __future__ import annotations

from prometheus_client import REGISTRY

from orbit_model.events import StepSucceeded, WorkflowStarted
from orbit_model.state import ExecutionState
from orbit_runtime.metrics import StepClock


def _count(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_result_without_a_known_dispatch_is_not_timed() -> None:
    clock = StepClock()
    state = ExecutionState(execution_id="x-1", workflow="unit-metrics")
    before = _count("orbit_executions_started_total", workflow="unit-metrics")
    # No definition known: not a task call, so no step counts and no timing.
    clock.committed(state, state, [WorkflowStarted(), StepSucceeded(unit="a")], None, now=1.0)
    assert _count("orbit_executions_started_total", workflow="unit-metrics") == before + 1
    assert len(clock) == 0


def test_start_times_are_bounded_by_capacity() -> None:
    clock = StepClock(capacity=2)
    for n in range(5):
        clock._start(f"x-{n}", "a", float(n), "t")
    assert len(clock) == 2
