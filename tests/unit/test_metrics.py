"""The decider's step clock: counts committed events, times attempts, forgets finished ones."""

from __future__ import annotations

from prometheus_client import REGISTRY

from orbit_model.compiler import compile_definition
from orbit_model.events import StepDispatched, StepSucceeded, WorkflowStarted
from orbit_model.ir import WorkflowIR
from orbit_model.state import ExecutionState
from orbit_services.decider.step_clock import StepClock, _Dispatched


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
        clock._start(f"x-{n}", "a", _Dispatched(float(n), "t", f"tok-{n}", n))
    assert len(clock) == 2


def _ir_with_task(task: str) -> WorkflowIR:
    source = f"""
orbit: 1
workflow: unit-schedule
version: 1.0.0
tasks:
  {task}: {{version: "1"}}
steps:
  - id: a
    task: {task}
"""
    return compile_definition(source).ir


def test_schedule_to_start_is_the_workers_start_less_the_dispatch() -> None:
    clock = StepClock()
    ir = _ir_with_task("sched-task")
    state = ExecutionState(execution_id="x-s", workflow="unit-schedule")
    name = "orbit_step_schedule_to_start_seconds"
    count_before = _count(f"{name}_count", task="sched-task")
    sum_before = _count(f"{name}_sum", task="sched-task")
    dispatched = StepDispatched(unit="a", token="tok-1", attempt=1)
    clock.committed(state, state, [dispatched], ir, now=1.0, now_ms=10_000)
    clock.task_started("x-s", "a", "tok-other", 10_100)  # not this delivery: not observed
    clock.task_started("x-s", "a", "tok-1", 10_250)
    clock.task_started("x-s", "a", "tok-1", 10_400)  # the same result again: observed once
    assert _count(f"{name}_count", task="sched-task") == count_before + 1
    assert _count(f"{name}_sum", task="sched-task") - sum_before == 0.25
    # A worker clock behind the decider's counts as no wait, never a negative one.
    clock.committed(state, state, [StepSucceeded(unit="a")], ir, now=2.0, now_ms=10_300)
    clock.committed(
        state,
        state,
        [StepDispatched(unit="a", token="tok-2", attempt=2)],
        ir,
        now=3.0,
        now_ms=20_000,
    )
    clock.task_started("x-s", "a", "tok-2", 19_000)
    assert _count(f"{name}_sum", task="sched-task") - sum_before == 0.25
    assert _count(f"{name}_count", task="sched-task") == count_before + 2
