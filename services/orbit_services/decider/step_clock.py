"""Counting what the committed events of an execution say, and timing attempts.

The decider counts executions and steps from the events it commits, after the
append succeeded: a batch that loses a race and is decided again is counted
once, and a batch that fails is not (the metrics: ``orbit_services.runtime.metrics``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orbit_model.events import (
    RetryScheduled,
    StepAttemptFailed,
    StepAttemptUncertain,
    StepDispatched,
    StepFailed,
    StepScheduled,
    StepSucceeded,
    WorkflowStarted,
)
from orbit_model.ir import WorkflowIR
from orbit_model.state import ExecutionState
from orbit_model.steps import unit_call
from orbit_sdk.clock import epoch_ms
from orbit_services.runtime.metrics import (
    EXECUTIONS_FINISHED,
    EXECUTIONS_STARTED,
    STEP_ATTEMPTS_FAILED,
    STEP_DURATION,
    STEP_SCHEDULE_TO_START,
    STEPS_DISPATCHED,
    STEPS_FAILED,
    STEPS_REDELIVERED,
    STEPS_RETRIED,
    STEPS_SCHEDULED,
    STEPS_SUCCEEDED,
)


@dataclass
class _Dispatched:
    at: float
    """When its StepDispatched committed, on this process's monotonic clock."""
    task: str
    token: str
    wall_ms: int
    """The same moment on the wall clock (epoch ms), to compare with a worker's."""
    started_seen: bool = False
    """Whether a worker's start of this delivery was observed already."""


_TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled", "timed_out"})


class StepClock:
    """Counts what the committed events of an execution say, and times attempts.

    Step durations are measured from the commit of ``StepDispatched`` to the
    commit of the attempt's result (``StepSucceeded``, ``StepAttemptFailed``
    or ``StepAttemptUncertain``) on this process's monotonic clock, because
    events carry no timestamps. The start times are kept in memory only: a
    decider restart (or a partition moving to another decider) loses those
    of attempts in flight, whose durations are then not observed. At most
    ``capacity`` executions are tracked, the least recently touched dropped first.
    """

    def __init__(self, capacity: int = 50_000) -> None:
        self.capacity = capacity
        self._started: OrderedDict[str, dict[str, _Dispatched]] = OrderedDict()

    def committed(
        self,
        before: ExecutionState,
        state: ExecutionState,
        events: Sequence[Any],
        ir: WorkflowIR | None,
        *,
        now: float | None = None,
        now_ms: int | None = None,
    ) -> None:
        """Count the events one append committed (``before`` → ``state``)."""
        at = time.monotonic() if now is None else now
        wall_ms = epoch_ms() if now_ms is None else now_ms
        workflow = state.workflow
        execution_id = state.execution_id
        for event in events:
            if isinstance(event, WorkflowStarted):
                EXECUTIONS_STARTED.labels(workflow).inc()
                continue
            unit = getattr(event, "unit", None)
            if unit is None:
                continue
            task = _task_of(ir, unit)
            if task is None:
                continue  # not a task call (a sleep, an await, a child's own steps)
            labels = (workflow, task)
            if isinstance(event, StepScheduled):
                STEPS_SCHEDULED.labels(*labels).inc()
            elif isinstance(event, StepDispatched):
                STEPS_DISPATCHED.labels(*labels).inc()
                if event.redelivery:
                    STEPS_REDELIVERED.labels(*labels).inc()
                self._start(execution_id, unit, _Dispatched(at, task, event.token, wall_ms))
            elif isinstance(event, StepSucceeded):
                STEPS_SUCCEEDED.labels(*labels).inc()
                self._stop(execution_id, unit, at, "succeeded")
            elif isinstance(event, StepAttemptFailed):
                STEP_ATTEMPTS_FAILED.labels(*labels).inc()
                self._stop(execution_id, unit, at, "failed")
            elif isinstance(event, StepAttemptUncertain):
                self._stop(execution_id, unit, at, "uncertain")
            elif isinstance(event, StepFailed):
                STEPS_FAILED.labels(*labels).inc()
            elif isinstance(event, RetryScheduled):
                STEPS_RETRIED.labels(*labels).inc()
        if state.terminal and not before.terminal:
            status = str(state.status)
            if status in _TERMINAL_STATUSES:
                EXECUTIONS_FINISHED.labels(workflow, status).inc()
            self._started.pop(execution_id, None)

    def task_started(self, execution_id: str, unit: str, token: str, started_at: int) -> None:
        """A worker's result says when it began ``token``'s attempt of ``unit`` (epoch ms).

        Observed once per delivery: the unit's entry is marked, and it goes
        when the attempt's result is counted.
        """
        dispatched = self._started.get(execution_id, {}).get(unit)
        if dispatched is None or dispatched.token != token or dispatched.started_seen:
            return
        dispatched.started_seen = True
        waited = max(started_at - dispatched.wall_ms, 0) / 1000
        STEP_SCHEDULE_TO_START.labels(dispatched.task).observe(waited)

    def _start(self, execution_id: str, unit: str, dispatched: _Dispatched) -> None:
        units = self._started.setdefault(execution_id, {})
        units[unit] = dispatched
        self._started.move_to_end(execution_id)
        while len(self._started) > self.capacity:
            self._started.popitem(last=False)

    def _stop(self, execution_id: str, unit: str, at: float, outcome: str) -> None:
        units = self._started.get(execution_id)
        if not units or unit not in units:
            return
        dispatched = units.pop(unit)
        if not units:
            self._started.pop(execution_id, None)
        STEP_DURATION.labels(dispatched.task, outcome).observe(max(at - dispatched.at, 0.0))

    def __len__(self) -> int:
        return len(self._started)


def _task_of(ir: WorkflowIR | None, unit: str) -> str | None:
    if ir is None:
        return None
    try:
        return unit_call(ir, unit)[1].task
    except Exception:  # not a call unit
        return None
