"""Random interleavings of everything the world can tell an execution.

Results (good, failed, duplicate, stale), signals, timers (due, early,
unknown), lost workers and cancels arrive in any order. After every input
the decider settles; the fold must accept every event, replaying the
history must give the state built step by step, and deciding again must
give nothing. When the world stops misbehaving, every execution ends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from orbit_model import compile_definition
from orbit_model.decider import Limits, decide, decide_until_stable
from orbit_model.events import Event, TaskFailure
from orbit_model.inputs import (
    accept_cancel,
    accept_lost_delivery,
    accept_result,
    accept_signal,
    accept_timer,
    start_execution,
)
from orbit_model.ir import AwaitStep, WorkflowIR
from orbit_model.state import ExecutionState, UnitStatus, evolve, replay
from orbit_model.units import parse_unit

EXAMPLES = Path(__file__).parents[3] / "examples"

EXTRA = """
orbit: 1
workflow: cleanup
version: 1.0.0
timeout: 1h
signals: {go: {type: object}}
tasks:
  work: {version: "1"}
  undo: {version: "1"}
  tidy: {version: "1"}
steps:
  - id: first
    task: work
    retry: {max_attempts: 2, initial_interval: 1s}
    compensate: {task: undo, retry: {max_attempts: 2}}
  - id: maybe
    task: work
    continue_on_error: true
    timeout: 30s
  - id: wait
    await: go
    timeout: 10m
    after: []
  - id: many
    for: ${ [1, 2, 3, 4] }
    concurrency: 2
    task: work
    input: {n: "${ item }"}
    after: [first]
finally:
  - id: tidy
    task: tidy
"""

# A good answer for each task, satisfying its output contract.
GOOD: dict[str, Any] = {
    "reserve-stock": {"id": "r-1"},
    "charge-card": {"amount": 10},
    "square": {"value": 4},
    "sum": {"total": 4},
}
INPUTS: dict[str, Any] = {
    "order-fulfilment": {"order_id": "o-1", "items": [{}, {}], "callback_url": "https://x.test"},
    "fan-out": {"numbers": [1, 2, 3]},
    "cleanup": None,
}
DEFINITIONS = {
    ir.name: ir
    for ir in (
        compile_definition((EXAMPLES / "order-fulfilment.yaml").read_text()).ir,
        compile_definition((EXAMPLES / "fan-out.yaml").read_text()).ir,
        compile_definition(EXTRA).ir,
    )
}


class ExecutionMachine(RuleBasedStateMachine):
    definition: WorkflowIR
    state: ExecutionState
    history: list[Event]
    now: int
    limits: Limits

    @initialize(
        name=st.sampled_from(sorted(DEFINITIONS)),
        history_limit=st.sampled_from([None, None, 40]),
    )
    def start(self, name: str, history_limit: int | None) -> None:
        self.definition = DEFINITIONS[name]
        self.limits = Limits(max_history_events=history_limit, max_fan_out=10)
        self.now = 1_000_000
        self.history = []
        self.state = ExecutionState()
        self._append([start_execution(self.definition, "sha256:x", "e-1", INPUTS[name])])

    # -- plumbing ----------------------------------------------------------

    def _append(self, events: list[Event]) -> None:
        for event in events:
            self.state = evolve(self.state, event)
            self.history.append(event)
        state, decided = decide_until_stable(self.state, self.definition, self.now, self.limits)
        for event in decided:
            self.state = evolve(self.state, event)
            self.history.append(event)
        assert self.state == state

    def _tokens(self) -> list[str]:
        return sorted(token for unit in self.state.units.values() for token in unit.tokens)

    def _in_flight(self) -> list[str]:
        return sorted(unit.token for unit in self.state.units.values() if unit.token)

    def _good_output(self, token: str) -> Any:
        unit = self.state.unit_of_token(token) or ""
        for task, output in GOOD.items():
            if task in self._task_names_of(unit):
                return output
        return {}

    def _task_names_of(self, unit: str) -> set[str]:
        parsed = parse_unit(unit)
        steps = (*self.definition.steps, *self.definition.finally_steps)
        step = next((s for s in steps if s.id == parsed.step), None)
        call = getattr(step, "call", None)
        if parsed.role == "compensate":
            return set()
        return {call.task} if call is not None else set()

    def _waiting_signals(self) -> list[str]:
        """Signals an ``await`` unit waits for right now."""
        names = []
        for step in self.definition.steps:
            if (
                isinstance(step, AwaitStep)
                and self.state.unit(step.id).status is UnitStatus.SCHEDULED
            ):
                names.append(step.signal)
        return names

    # -- the world -----------------------------------------------------------

    @precondition(lambda self: bool(self._tokens()))
    @rule(data=st.data())
    def succeed(self, data: st.DataObject) -> None:
        token = data.draw(st.sampled_from(self._tokens()))
        self._append(accept_result(self.state, self.definition, token, self._good_output(token)))

    @precondition(lambda self: bool(self._tokens()))
    @rule(data=st.data(), output=st.sampled_from([None, {}, {"id": 3}, [1], "text"]))
    def answer_anything(self, data: st.DataObject, output: Any) -> None:
        token = data.draw(st.sampled_from(self._tokens()))
        self._append(accept_result(self.state, self.definition, token, output))

    @precondition(lambda self: bool(self._tokens()))
    @rule(data=st.data(), retryable=st.booleans(), code=st.sampled_from(["BOOM", "OUT_OF_STOCK"]))
    def fail(self, data: st.DataObject, retryable: bool, code: str) -> None:
        token = data.draw(st.sampled_from(self._tokens()))
        error = TaskFailure(code=code, message="failed", retryable=retryable)
        self._append(accept_result(self.state, self.definition, token, error=error))

    @precondition(lambda self: bool(self._in_flight()))
    @rule(data=st.data())
    def lose_worker(self, data: st.DataObject) -> None:
        token = data.draw(st.sampled_from(self._in_flight()))
        self._append(accept_lost_delivery(self.state, token, "worker lost"))

    @precondition(lambda self: bool(self.definition.signals) and not self.state.terminal)
    @rule(data=st.data())
    def signal(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.definition.signals)))
        payload = {"approved": data.draw(st.booleans())} if name == "approval" else {}
        self._append(accept_signal(self.state, self.definition, name, payload))

    @precondition(lambda self: bool(self.state.timers))
    @rule(data=st.data())
    def fire_due_timer(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.state.timers)))
        self.now = max(self.now, self.state.timers[key])
        self._append(accept_timer(self.state, key, self.now))

    @rule(key=st.sampled_from(["workflow", "retry:nope", "timer:first", "timeout:x"]))
    def fire_unknown_or_early_timer(self, key: str) -> None:
        before = len(self.history)
        # Early means before its due time (which may lie behind the clock already).
        due = self.state.timers.get(key)
        early = self.now - 1 if due is None else due - 1
        assert accept_timer(self.state, key, early) == []
        self._append(accept_timer(self.state, key, early))
        assert len(self.history) == before

    @precondition(lambda self: not self.state.terminal)
    @rule(reason=st.sampled_from(["", "by the test"]))
    def cancel(self, reason: str) -> None:
        self._append(accept_cancel(self.state, reason))

    @rule(milliseconds=st.integers(0, 3_600_000))
    def time_passes(self, milliseconds: int) -> None:
        self.now += milliseconds
        self._append([])

    # -- what must always hold ---------------------------------------------

    @invariant()
    def replay_equals_the_state_built_step_by_step(self) -> None:
        assert replay(self.history) == self.state

    @invariant()
    def deciding_again_gives_nothing(self) -> None:
        assert decide(self.state, self.definition, self.now, self.limits) == []

    def teardown(self) -> None:
        if not hasattr(self, "state"):
            return
        for _ in range(500):  # the world behaves from now on
            if self.state.terminal:
                break
            if self._in_flight():
                token = self._in_flight()[0]
                self._append(
                    accept_result(self.state, self.definition, token, self._good_output(token))
                )
            elif self._waiting_signals():
                for name in self._waiting_signals():
                    payload = {"approved": True} if name == "approval" else {}
                    self._append(accept_signal(self.state, self.definition, name, payload))
            elif self.state.timers:
                key, due = min(self.state.timers.items(), key=lambda item: (item[1], item[0]))
                self.now = max(self.now, due)
                self._append(accept_timer(self.state, key, self.now))
            else:
                break
        assert self.state.terminal, (self.state.status, self.state.units)
        assert replay(self.history) == self.state


ExecutionMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestExecutionMachine = ExecutionMachine.TestCase
