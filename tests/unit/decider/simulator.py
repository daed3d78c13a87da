"""A pure in-memory Orbit: the decider driven by a virtual clock and fake workers.

Workers are functions of ``(input, delivery)``. Each returns the output, or
raises :class:`Fail` (a task error), :class:`Hang` (never answers) or
:class:`Crash` (the worker is lost mid-task). Every input goes through
:func:`orbit_model.plan.plan`, the decider service's own pure turn: results
kept only if storable, http steps answered at once while the adapter is off,
and the messages the events call for. The simulator checks on every event
that the fold accepts it and that replaying the history gives the same
state, and on every turn that each dispatch has exactly its one message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orbit_model import compile_definition
from orbit_model.decider import Limits, decide
from orbit_model.events import Event, StepDispatched, TaskFailure
from orbit_model.inputs import (
    accept_attempt_timeout,
    accept_cancel,
    accept_signal,
    start_execution,
)
from orbit_model.ir import WorkflowIR
from orbit_model.messages import (
    DeciderInput,
    DeliveryLost,
    Outgoing,
    StartChild,
    TaskAssignment,
    TaskResult,
    TimerDue,
    Wake,
)
from orbit_model.outcome_codes import OutcomeCode
from orbit_model.plan import Facts, Policy, plan
from orbit_model.state import ExecutionState, UnitStatus, evolve_all, replay
from orbit_model.timer_keys import TimerKey
from orbit_model.topology import Topology
from orbit_model.units import parse_unit

TOPOLOGY = Topology("sim", 4)


class Fail(Exception):
    def __init__(self, code: str, message: str = "failed", retryable: bool = True) -> None:
        super().__init__(message)
        self.failure = TaskFailure(code=code, message=message, retryable=retryable)


class Hang(Exception):
    """The worker never answers."""


class Crash(Exception):
    """The worker is lost while it holds the task."""


@dataclass(frozen=True)
class Delivery:
    unit: str
    attempt: int
    token: str
    redelivery: bool
    input: Any


Worker = Callable[[Any, Delivery], Any]


@dataclass
class Simulator:
    definition: WorkflowIR
    workers: dict[str, Worker]
    limits: Limits = field(default_factory=Limits)
    now: int = 1_000_000
    history: list[Event] = field(default_factory=list)
    state: ExecutionState = field(default_factory=ExecutionState)
    deliveries: list[Delivery] = field(default_factory=list)
    """Every delivery a worker received, in order."""
    http_adapter_enabled: bool = True
    max_payload_bytes: int | None = None
    children: dict[str, WorkflowIR] = field(default_factory=dict)
    """Child definitions by hash, for a child execution's ``StartChild``."""
    outbox: list[Outgoing] = field(default_factory=list)
    """Every message the turns called for, in order."""
    _dispatches: dict[str, StepDispatched] = field(default_factory=dict)
    """Every dispatch that may still be in flight, oldest first (a token is issued once)."""

    @classmethod
    def from_yaml(cls, text: str, workers: dict[str, Worker], **options: Any) -> Simulator:
        return cls(compile_definition(text).ir, workers, **options)

    # -- driving -----------------------------------------------------------

    def append(self, events: list[Event]) -> None:
        self.state = evolve_all(self.state, events)
        self.history += events
        for event in events:
            if isinstance(event, StepDispatched):
                self._dispatches[event.token] = event

    @property
    def policy(self) -> Policy:
        return Policy(self.limits, self.http_adapter_enabled, self.max_payload_bytes)

    def turn(
        self, inputs: list[DeciderInput], heartbeats: dict[str, int | None] | None = None
    ) -> list[Event]:
        """One decider turn on ``inputs``, as the service takes it; the events appended.

        Raises:
            OrbitError: The execution refused an input (the service would log it).
        """
        before = len(self.history)
        facts = Facts(
            definition=self.definition if self.state.last_seq else None,
            children=self.children,
            heartbeats=heartbeats or {},
        )
        decided = plan(
            self.state, inputs, facts, now=self.now, policy=self.policy, topology=TOPOLOGY
        )
        assert decided is not None, "an input for an execution that does not exist"
        if decided.refused:
            raise decided.refused[0][1]
        self.append(decided.events)
        assert self.state == decided.state
        assert decide(self.state, self.definition, self.now, self.limits) == []
        check_messages(decided.events, decided.state, decided.messages)
        self.outbox += decided.messages
        return self.history[before:]

    def settle(self) -> list[Event]:
        """A decider turn with nothing new: a ``Wake``."""
        return self.turn([Wake(execution_id=self.state.execution_id)])

    def start(self, input: Any = None, execution_id: str = "e-1") -> None:
        self.append([start_execution(self.definition, "sha256:test", execution_id, input)])
        self.settle()

    def signal(self, name: str, payload: Any = None) -> None:
        self.append(accept_signal(self.state, self.definition, name, payload))
        self.settle()

    def cancel(self, reason: str = "") -> None:
        self.append(accept_cancel(self.state, reason))
        self.settle()

    # -- one input at a time (each returns the events it appended) ----------

    def result(
        self, token: str, output: Any = None, error: TaskFailure | None = None
    ) -> list[Event]:
        """One worker result for delivery ``token``, then the decider's rounds."""
        execution_id = self.state.execution_id
        return self.turn(
            [TaskResult(execution_id=execution_id, token=token, output=output, error=error)]
        )

    def fire(self, key: str, at: int | None = None) -> list[Event]:
        """The timer service fires ``key`` at ``at`` (default: now), then the decider's rounds."""
        if at is not None:
            self.now = at
        return self.turn([TimerDue(execution_id=self.state.execution_id, key=key)])

    def lose(self, token: str, reason: str = "worker lost") -> list[Event]:
        """The worker holding ``token`` is gone, then the decider's rounds."""
        execution_id = self.state.execution_id
        return self.turn([DeliveryLost(execution_id=execution_id, token=token, reason=reason)])

    def attempt_timeout(self, token: str, code: OutcomeCode) -> list[Event]:
        """A queue or heartbeat deadline of ``token`` passed, then the decider's rounds."""
        before = len(self.history)
        self.append(accept_attempt_timeout(self.state, token, code))
        self.settle()
        return self.history[before:]

    def pending_deliveries(self) -> list[StepDispatched]:
        """Dispatched deliveries still in flight, oldest first."""
        for token, event in list(self._dispatches.items()):
            if self.state.unit(event.unit).token != token:
                del self._dispatches[token]  # no longer in flight, and never again
        return list(self._dispatches.values())

    def work(self) -> bool:
        """Let workers answer every delivery in flight; whether anything happened."""
        progressed = False
        hung = getattr(self, "_hung", set())
        self._hung = hung
        for dispatched in self.pending_deliveries():
            if dispatched.token in hung:
                continue
            unit = self.state.units[dispatched.unit]
            task = self._task_of(dispatched.unit)
            delivery = Delivery(
                dispatched.unit,
                dispatched.attempt,
                dispatched.token,
                dispatched.redelivery,
                unit.input,
            )
            self.deliveries.append(delivery)
            worker = self.workers[task]
            execution_id = self.state.execution_id
            answer: DeciderInput
            try:
                output = worker(unit.input, delivery)
            except Fail as failure:
                answer = TaskResult(
                    execution_id=execution_id, token=delivery.token, error=failure.failure
                )
            except Hang:
                hung.add(delivery.token)
                continue
            except Crash:
                answer = DeliveryLost(execution_id=execution_id, token=delivery.token)
            else:
                answer = TaskResult(execution_id=execution_id, token=delivery.token, output=output)
            self.turn([answer])
            progressed = True
        return progressed

    def advance_to_next_timer(self) -> bool:
        timers = self.state.timers
        if not timers:
            return False
        key, due = min(timers.items(), key=lambda item: (item[1], item[0]))
        self.now = max(self.now, due)
        timer = TimerKey.parse(key)
        heartbeats: dict[str, int | None] = {}
        if timer.kind.is_liveness:
            # Workers here take deliveries at once; a hung one never heartbeats again.
            hung = getattr(self, "_hung", set())
            heartbeats[key] = 0 if timer.subject in hung else self.now
        self.turn([TimerDue(execution_id=self.state.execution_id, key=key)], heartbeats)
        return True

    def run(self, max_steps: int = 10_000) -> ExecutionState:
        """Work and fire timers until the execution ends or nothing can happen."""
        for _ in range(max_steps):
            if self.state.terminal:
                break
            if self.work():
                continue
            if not self.advance_to_next_timer():
                break
        assert replay(self.history) == self.state
        return self.state

    # -- looking -----------------------------------------------------------

    def _task_of(self, unit_key: str) -> str:
        parsed = parse_unit(unit_key)
        if parsed.role == "finally":
            step = next(s for s in self.definition.finally_steps if s.id == parsed.step)
        else:
            step = self.definition.step(parsed.step)
        call = step.compensate.call if parsed.role == "compensate" else step.call  # type: ignore[union-attr]
        return call.task

    def types(self) -> list[str]:
        return [event.type for event in self.history]

    def unit_status(self, key: str) -> UnitStatus:
        return self.state.unit(key).status


def check_messages(events: list[Event], state: ExecutionState, messages: list[Outgoing]) -> None:
    """Each dispatch still in flight after the turn has its one message, and no other
    task or child start is sent."""
    # A token names its unit: a dispatch is in flight if its unit still holds its token.
    dispatched = {
        event.token: event
        for event in events
        if isinstance(event, StepDispatched) and state.unit(event.unit).token == event.token
    }
    sent: dict[str, Outgoing] = {}
    for outgoing in messages:
        message = outgoing.message
        if isinstance(message, TaskAssignment):
            assert message.token not in sent, f"{message.token} sent twice"
            sent[message.token] = outgoing
            assert outgoing.headers is not None
            assert "traceparent" in outgoing.headers
            assert outgoing.route == TOPOLOGY.task_route(message.task, message.task_version)
            assert message.idempotency_key == state.idempotency_key(message.unit)
        elif isinstance(message, StartChild):
            assert message.parent_token not in sent, f"{message.parent_token} sent twice"
            sent[message.parent_token] = outgoing
            assert outgoing.route == TOPOLOGY.decider_route(message.execution_id)
    assert sent.keys() == dispatched.keys(), (sorted(sent), sorted(dispatched))
    for token, outgoing in sent.items():
        message = outgoing.message
        attempt = message.attempt if isinstance(message, TaskAssignment) else None
        assert attempt in (None, dispatched[token].attempt)
