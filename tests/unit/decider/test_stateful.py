"""Random interleavings of everything the world can tell an execution.

Results (good, failed, duplicate, stale, unstorable, too large), signals,
timers (due, early, unknown; deadlines with a live or a silent worker), lost
workers, cancels and cancels from a parent that is not its own arrive in any
order, under a random policy (the HTTP adapter on or off, a payload limit).
Every input goes through :func:`orbit_model.plan.plan`, as in the decider
service. After every input the fold must accept every event, replaying the
history must give the state built step by step, deciding again must give
nothing, and every dispatch must have its one message. When the world stops
misbehaving, every execution ends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from orbit_model import compile_definition
from orbit_model.decider import Limits, decide
from orbit_model.events import Event, StepAttemptFailed, StepSucceeded, TaskFailure
from orbit_model.inputs import accept_cancel, accept_signal, start_execution
from orbit_model.ir import AwaitStep, WorkflowIR
from orbit_model.messages import CancelChild, DeciderInput, DeliveryLost, TaskResult, TimerDue
from orbit_model.payloads import payload_problem
from orbit_model.plan import Facts, Policy, plan
from orbit_model.state import ExecutionState, UnitStatus, evolve, replay
from orbit_model.timer_keys import TimerKey
from orbit_model.units import parse_unit

from .simulator import TOPOLOGY, check_messages

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
    policy: Policy

    @initialize(
        name=st.sampled_from(sorted(DEFINITIONS)),
        history_limit=st.sampled_from([None, None, 40]),
        adapter=st.booleans(),
        payload_limit=st.sampled_from([None, None, 64]),
    )
    def start(
        self, name: str, history_limit: int | None, adapter: bool, payload_limit: int | None
    ) -> None:
        self.definition = DEFINITIONS[name]
        self.limits = Limits(max_history_events=history_limit, max_fan_out=10)
        self.policy = Policy(self.limits, adapter, payload_limit)
        self.now = 1_000_000
        self.history = []
        self.state = ExecutionState()
        self._append([start_execution(self.definition, "sha256:x", "e-1", INPUTS[name])])

    # -- plumbing ----------------------------------------------------------

    def _append(self, events: list[Event]) -> None:
        """Events the gateway appends (a start, a signal, a cancel), then a decider turn."""
        for event in events:
            self.state = evolve(self.state, event)
            self.history.append(event)
        self._turn([])

    def _turn(
        self, inputs: list[DeciderInput], heartbeats: dict[str, int | None] | None = None
    ) -> None:
        """A decider turn on ``inputs``, as the service takes it."""
        facts = Facts(definition=self.definition, heartbeats=heartbeats or {})
        decided = plan(
            self.state, inputs, facts, now=self.now, policy=self.policy, topology=TOPOLOGY
        )
        assert decided is not None
        for event in decided.events:
            self.state = evolve(self.state, event)
            self.history.append(event)
        assert self.state == decided.state
        check_messages(decided.events, decided.state, decided.messages)

    def _result(self, token: str, output: Any = None, error: TaskFailure | None = None) -> None:
        self._turn([TaskResult(execution_id="e-1", token=token, output=output, error=error)])

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
        self._result(token, self._good_output(token))

    @precondition(lambda self: bool(self._tokens()))
    @rule(data=st.data(), output=st.sampled_from([None, {}, {"id": 3}, [1], "text"]))
    def answer_anything(self, data: st.DataObject, output: Any) -> None:
        token = data.draw(st.sampled_from(self._tokens()))
        self._result(token, output)

    @precondition(lambda self: bool(self._in_flight()))
    @rule(
        data=st.data(),
        output=st.sampled_from([{"id": "a\x00b"}, {"id": "\ud800"}, {"id": "x" * 100}]),
    )
    def answer_what_may_not_be_stored(self, data: st.DataObject, output: Any) -> None:
        token = data.draw(st.sampled_from(self._in_flight()))
        unit = self.state.unit_of_token(token)
        limit = self.policy.max_payload_bytes
        storable = output == {"id": "x" * 100} and limit is None
        before = len(self.history)
        self._result(token, output)
        new = self.history[before:]
        if not storable:  # the attempt failed instead, and is not retried
            assert not any(isinstance(e, StepSucceeded) and e.unit == unit for e in new)
            failed = [e for e in new if isinstance(e, StepAttemptFailed) and e.unit == unit]
            assert [e.error.code for e in failed] in (
                [],  # the unit was not waiting for it (a cancelled one, say)
                ["INVALID_OUTPUT"],
                ["PAYLOAD_TOO_LARGE"],
            )

    @precondition(lambda self: bool(self._tokens()))
    @rule(data=st.data(), retryable=st.booleans(), code=st.sampled_from(["BOOM", "OUT_OF_STOCK"]))
    def fail(self, data: st.DataObject, retryable: bool, code: str) -> None:
        token = data.draw(st.sampled_from(self._tokens()))
        error = TaskFailure(code=code, message="failed", retryable=retryable)
        self._result(token, error=error)

    @precondition(lambda self: bool(self._in_flight()))
    @rule(data=st.data())
    def lose_worker(self, data: st.DataObject) -> None:
        token = data.draw(st.sampled_from(self._in_flight()))
        self._turn([DeliveryLost(execution_id="e-1", token=token)])

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
        heartbeats: dict[str, int | None] = {}
        if TimerKey.parse(key).kind.is_liveness:
            # Nobody holds the delivery, its worker is silent, or it heartbeats now.
            heartbeats[key] = data.draw(st.sampled_from([None, 0, self.now]))
        self._turn([TimerDue(execution_id="e-1", key=key)], heartbeats)

    @rule(key=st.sampled_from(["workflow", "retry:nope", "timer:first", "timeout:x"]))
    def fire_unknown_or_early_timer(self, key: str) -> None:
        before = len(self.history)
        # Early means before its due time (which may lie behind the clock already).
        due = self.state.timers.get(key)
        early = self.now - 1 if due is None else due - 1
        clock, self.now = self.now, early
        self._turn([TimerDue(execution_id="e-1", key=key)])
        self.now = clock
        assert len(self.history) == before

    @precondition(lambda self: not self.state.terminal)
    @rule(reason=st.sampled_from(["", "by the test"]))
    def cancel(self, reason: str) -> None:
        self._append(accept_cancel(self.state, reason))

    @rule()
    def cancel_from_a_parent_it_does_not_have(self) -> None:
        before = len(self.history)
        self._turn([CancelChild(execution_id="e-1", parent_execution_id="p-1", reason="no")])
        assert len(self.history) == before

    @rule(milliseconds=st.integers(0, 3_600_000))
    def time_passes(self, milliseconds: int) -> None:
        self.now += milliseconds
        self._append([])

    # -- what must always hold ---------------------------------------------

    @invariant()
    def replay_equals_the_state_built_step_by_step(self) -> None:
        assert replay(self.history) == self.state

    @invariant()
    def every_event_can_be_stored(self) -> None:
        for event in self.history[-20:]:
            assert payload_problem(event.model_dump()) is None, event

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
                self._result(token, self._good_output(token))
            elif self._waiting_signals():
                for name in self._waiting_signals():
                    payload = {"approved": True} if name == "approval" else {}
                    self._append(accept_signal(self.state, self.definition, name, payload))
            elif self.state.timers:
                key, due = min(self.state.timers.items(), key=lambda item: (item[1], item[0]))
                self.now = max(self.now, due)
                heartbeats = {key: self.now} if TimerKey.parse(key).kind.is_liveness else {}
                self._turn([TimerDue(execution_id="e-1", key=key)], heartbeats)
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
