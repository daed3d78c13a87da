"""The decider's pure turn (orbit_model.plan): what the service used to decide in its I/O class.

The calls no worker may take (http steps while the HTTP adapter is off),
results that cannot be stored, child workflows started, answered and
cancelled through their messages, timers put back, inputs refused. A
:class:`Family` runs a parent and its children as the decider would, each
message of one going to the other through ``plan``.
"""

from __future__ import annotations

import textwrap
from typing import Any

from orbit_model import compile_definition
from orbit_model.children import child_execution_id, parent_waits
from orbit_model.compiler import Definition
from orbit_model.errors import ErrorCode
from orbit_model.events import (
    RetryScheduled,
    StepAttemptFailed,
    StepDispatched,
    StepFailed,
    TaskFailure,
)
from orbit_model.inputs import accept_cancel, start_execution
from orbit_model.ir import CallStep
from orbit_model.messages import (
    CancelChild,
    DeciderInput,
    MessageParked,
    Outgoing,
    StartChild,
    TaskAssignment,
    TaskResult,
    TimerDue,
    Wake,
)
from orbit_model.outcome_codes import OutcomeCode
from orbit_model.plan import MAX_CLOCK_SKEW_MS, Facts, Policy, plan, storable_result
from orbit_model.state import ExecutionState, UnitStatus, evolve, replay

from .simulator import TOPOLOGY, Simulator, check_messages

HEAD = "orbit: 1\nversion: 1.0.0\n"
NOW = 1_000_000


def compiled(name: str, body: str) -> Definition:
    return compile_definition(HEAD + f"workflow: {name}\n" + textwrap.dedent(body))


CHILD = compiled(
    "kid",
    """
    tasks: {work: {version: "1"}}
    steps:
      - id: work
        task: work
    output: {made: "${ steps.work.output }"}
    """,
)


def pinned(parent: Definition, child: Definition) -> Definition:
    """``parent`` with its child steps pinned to ``child``'s hash, as registering does."""
    steps = tuple(
        step.model_copy(update={"child": step.child.model_copy(update={"hash": child.hash})})
        if isinstance(step, CallStep) and step.child is not None
        else step
        for step in parent.ir.steps
    )
    return Definition(ir=parent.ir.model_copy(update={"steps": steps}), hash=parent.hash)


PARENT = pinned(
    compiled(
        "parent",
        """
        steps:
          - id: kid
            workflow: kid@1.0.0
            retry: {max_attempts: 2, initial_interval: 1s}
        output: ${ steps.kid.output }
        """,
    ),
    CHILD,
)


class Family:
    """A parent and its children, each message delivered through ``plan`` at once."""

    def __init__(
        self, parent: Definition, *children: Definition, hold: tuple[type, ...] = ()
    ) -> None:
        self.definitions = {d.hash: d.ir for d in (parent, *children)}
        self.states: dict[str, ExecutionState] = {}
        self.sent: list[Outgoing] = []
        self.hold = hold
        """Message types kept back in ``held`` (to deliver out of order) instead of sent."""
        self.held: list[DeciderInput] = []
        self.now = NOW
        self.dropped: list[DeciderInput] = []
        """Inputs for executions that do not exist."""
        created = start_execution(parent.ir, parent.hash, "p-1", None)
        self.states["p-1"] = replay([created])
        self.deliver("p-1", Wake(execution_id="p-1"))

    def deliver(self, execution_id: str, *inputs: DeciderInput) -> None:
        """One decider turn of ``execution_id``, then every message it sent, in order."""
        state = self.states.get(execution_id, ExecutionState())
        definition = self.definitions.get(state.definition_hash) if state.last_seq else None
        facts = Facts(definition=definition, children=self.definitions, parents=self.states)
        decided = plan(state, list(inputs), facts, now=self.now, policy=Policy(), topology=TOPOLOGY)
        if decided is None:  # for no execution (a cancel that overtook its child's start)
            self.dropped.extend(inputs)
            return
        assert not decided.refused, decided.refused
        check_messages(decided.events, decided.state, decided.messages)
        if decided.state.last_seq:
            self.states[execution_id] = decided.state
        self.sent += decided.messages
        for outgoing in decided.messages:
            message = outgoing.message
            if isinstance(message, self.hold):
                self.held.append(message)
            elif not isinstance(message, TaskAssignment):
                self.deliver(message.execution_id, message)

    def work(self, execution_id: str, output: Any = None, error: TaskFailure | None = None) -> None:
        """The worker of the one task in flight of ``execution_id`` answers."""
        [token] = [u.token for u in self.states[execution_id].units.values() if u.token]
        result = TaskResult(execution_id=execution_id, token=token, output=output, error=error)
        self.deliver(execution_id, result)

    def fire(self, execution_id: str, key: str) -> None:
        """The clock moves to when ``key`` of ``execution_id`` is due, and it fires."""
        self.now = self.states[execution_id].timers[key]
        self.deliver(execution_id, TimerDue(execution_id=execution_id, key=key, due_at=self.now))

    def cancel(self, execution_id: str) -> None:
        state = self.states[execution_id]
        [requested] = accept_cancel(state, "by the test")
        self.states[execution_id] = evolve(state, requested)
        self.deliver(execution_id, Wake(execution_id=execution_id))

    def of(self, kind: type) -> list[Any]:
        return [outgoing.message for outgoing in self.sent if isinstance(outgoing.message, kind)]


# -- child workflows --


def test_a_child_starts_runs_and_answers_its_parent_with_its_output() -> None:
    family = Family(PARENT, CHILD)
    [start] = family.of(StartChild)
    assert start.execution_id == "p-1:kid"
    assert family.states["p-1:kid"].parent_execution_id == "p-1"
    family.work("p-1:kid", "made")
    assert family.states["p-1:kid"].status == "completed"
    assert family.states["p-1"].status == "completed"
    assert family.states["p-1"].output == {"made": "made"}


ONCE = compiled(
    "kid",
    """
    tasks: {work: {version: "1"}}
    steps:
      - id: work
        task: work
        retry: {max_attempts: 1}
    output: {made: "${ steps.work.output }"}
    """,
)


def test_a_failed_child_is_retried_as_a_new_child_then_fails_the_step_with_its_cause() -> None:
    family = Family(pinned(PARENT, ONCE), ONCE)
    declined = TaskFailure(code="NO", message="broke", details={"foo": "bar"})
    family.work("p-1:kid", error=declined)
    assert family.states["p-1:kid"].status == "failed"
    assert family.states["p-1"].unit("kid").status is UnitStatus.RETRY_WAIT
    family.fire("p-1", "retry:kid")
    # The retry is a child of its own: the first one's id would answer with its failure.
    assert [start.execution_id for start in family.of(StartChild)] == [
        "p-1:kid",
        "p-1:kid:attempt-2",
    ]
    family.work("p-1:kid:attempt-2", error=declined)
    parent = family.states["p-1"]
    assert parent.status == "failed"
    error = parent.unit("kid").error
    assert error is not None
    assert (error.code, error.retryable) == (OutcomeCode.CHILD_FAILED, True)
    assert isinstance(error.details, dict)
    assert (error.details["child_execution_id"], error.details["status"]) == (
        "p-1:kid:attempt-2",
        "failed",
    )
    # The child's error is in the details too, as it always was, without its causes.
    assert error.details["error"]["code"] == "NO"
    assert "cause" not in error.details["error"]
    # The chain keeps every level, down to the task's own error and its details.
    assert parent.error is not None
    assert [(e.code, e.step, e.execution_id) for e in parent.error.chain()] == [
        (OutcomeCode.CHILD_FAILED, None, None),
        (OutcomeCode.CHILD_FAILED, "kid", "p-1"),
        ("NO", None, "p-1:kid:attempt-2"),
        ("NO", "work", "p-1:kid:attempt-2"),
    ]
    assert parent.error.chain()[-1].details == {"foo": "bar"}


def test_a_child_whose_output_breaks_its_output_schema_fails_the_parents_step() -> None:
    strict = compiled(
        "kid",
        """
        output_schema: {type: object, required: [made], properties: {made: {type: integer}}}
        tasks: {work: {version: "1"}}
        steps:
          - id: work
            task: work
        output: {made: "${ steps.work.output }"}
        """,
    )
    family = Family(pinned(PARENT, strict), strict)
    family.work("p-1:kid", "not a number")
    child = family.states["p-1:kid"]
    assert child.status == "failed"
    assert child.error is not None
    assert child.error.code == ErrorCode.OUTPUT_CONTRACT_VIOLATION
    assert "$.made" in child.error.message
    error = family.states["p-1"].unit("kid").error
    assert error is not None
    assert error.code == OutcomeCode.CHILD_FAILED
    assert error.cause is not None
    assert error.cause.code == ErrorCode.OUTPUT_CONTRACT_VIOLATION


def test_a_child_that_failed_for_good_is_not_retried() -> None:
    # Its task said trying again cannot help: a new child would fail the same way.
    family = Family(PARENT, CHILD)
    family.work("p-1:kid", error=TaskFailure(code="NO", message="broke", retryable=False))
    error = family.states["p-1"].unit("kid").error
    assert error is not None
    assert (error.code, error.retryable) == (OutcomeCode.CHILD_FAILED, False)
    assert family.states["p-1"].status == "failed"
    assert [start.execution_id for start in family.of(StartChild)] == ["p-1:kid"]


def test_a_cancelled_child_is_not_retried() -> None:
    family = Family(PARENT, CHILD)
    family.cancel("p-1:kid")
    error = family.states["p-1"].unit("kid").error
    assert error is not None
    assert (error.code, error.retryable) == (OutcomeCode.CHILD_FAILED, False)
    assert family.states["p-1"].status == "failed"


def test_a_code_the_retry_policy_names_anywhere_in_the_chain_is_not_retried() -> None:
    parent = pinned(
        compiled(
            "parent",
            """
            steps:
              - id: kid
                workflow: kid@1.0.0
                retry: {max_attempts: 3, non_retryable: [CARD_DECLINED]}
            """,
        ),
        CHILD,
    )
    family = Family(parent, CHILD)
    family.work("p-1:kid", error=TaskFailure(code="CARD_DECLINED", message="no", retryable=False))
    assert family.states["p-1"].status == "failed"
    assert [start.execution_id for start in family.of(StartChild)] == ["p-1:kid"]


def test_a_timed_out_attempt_cancels_its_child_and_the_retry_starts_another() -> None:
    parent = pinned(
        compiled(
            "parent",
            """
            steps:
              - id: kid
                workflow: kid@1.0.0
                timeout: 10s
                retry: {max_attempts: 2, initial_interval: 1s}
            output: ${ steps.kid.output }
            """,
        ),
        CHILD,
    )
    family = Family(parent, CHILD)
    [token] = family.states["p-1"].unit("kid").tokens
    family.fire("p-1", f"timeout:{token}")
    [cancel] = family.of(CancelChild)
    assert cancel.execution_id == "p-1:kid"
    assert cancel.reason == "attempt 1 of step kid of its parent p-1 timed out"
    assert family.states["p-1:kid"].status == "cancelled"
    family.fire("p-1", "retry:kid")
    family.work("p-1:kid:attempt-2", "made")
    assert family.states["p-1"].status == "completed"
    assert family.states["p-1"].output == {"made": "made"}


def test_a_parent_that_stops_cancels_its_running_child() -> None:
    family = Family(PARENT, CHILD)
    family.cancel("p-1")
    [cancel] = family.of(CancelChild)
    assert (cancel.execution_id, cancel.parent_execution_id) == ("p-1:kid", "p-1")
    assert family.states["p-1:kid"].status == "cancelled"
    assert family.states["p-1"].status == "cancelled"


def test_a_cancel_that_overtakes_the_childs_start_is_kept_until_the_child_exists() -> None:
    family = Family(PARENT, CHILD, hold=(StartChild,))
    [start] = family.held
    family.cancel("p-1")
    [cancel] = family.of(CancelChild)
    assert family.dropped == [cancel]  # it found no child
    assert family.states["p-1"].status == "cancelled"
    family.deliver("p-1:kid", start)  # the start comes last
    child = family.states["p-1:kid"]
    assert child.status == "cancelled"
    assert child.cancel_reason == "its parent p-1 stopped before it started"
    # Its answer reaches a parent that has ended: recorded as stale, nothing more.
    assert family.states["p-1"].status == "cancelled"


def test_a_start_finds_whether_its_parent_still_waits() -> None:
    family = Family(PARENT, CHILD, hold=(StartChild,))
    [start] = family.held
    parent = family.states["p-1"]
    assert parent_waits(parent, start)
    assert parent_waits(None, start)  # unknown: taken to wait
    assert parent_waits(parent, start.model_copy(update={"parent_token": "p-1:other:1"}))
    # The step moved on to a later attempt (its first timed out): the first attempt's
    # child is no longer awaited (the retry starts one of its own).
    retried = parent.model_copy(
        update={
            "units": parent.units.set(
                "kid",
                parent.unit("kid").model_copy(
                    update={"status": UnitStatus.RETRY_WAIT, "token": None}
                ),
            )
        }
    )
    assert not parent_waits(retried, start)
    family.deliver("p-1:kid", start)
    assert family.states["p-1:kid"].status == "running"


def test_a_stranger_cannot_cancel_a_child() -> None:
    family = Family(PARENT, CHILD)
    family.deliver("p-1:kid", CancelChild(execution_id="p-1:kid", parent_execution_id="p-2"))
    assert family.states["p-1:kid"].status == "running"


def test_a_retried_start_reattaches_the_child_and_an_ended_child_answers_again() -> None:
    family = Family(PARENT, CHILD)
    [start] = family.of(StartChild)
    again = start.model_copy(update={"parent_token": "p-1:kid:2"})
    family.deliver("p-1:kid", again)
    child = family.states["p-1:kid"]
    assert child.parent_token == "p-1:kid:2"
    family.work("p-1:kid", "x")
    answers = [r for r in family.of(TaskResult) if r.execution_id == "p-1"]
    assert [r.token for r in answers] == ["p-1:kid:2"]  # to the delivery that waits now
    family.deliver("p-1:kid", start)  # repeated after the end: answered again
    answers = [r for r in family.of(TaskResult) if r.execution_id == "p-1"]
    assert [r.token for r in answers] == ["p-1:kid:2", "p-1:kid:1"]


def test_a_child_id_taken_by_another_execution_fails_the_parents_step() -> None:
    stranger = start_execution(CHILD.ir, CHILD.hash, "p-1:kid", None)
    family = Family.__new__(Family)
    family.definitions = {d.hash: d.ir for d in (PARENT, CHILD)}
    family.states = {"p-1:kid": replay([stranger])}
    family.sent = []
    family.hold = ()
    family.dropped = []
    family.now = NOW
    family.states["p-1"] = replay([start_execution(PARENT.ir, PARENT.hash, "p-1", None)])
    family.deliver("p-1", Wake(execution_id="p-1"))
    failure = family.states["p-1"].unit("kid").error
    assert failure is not None
    assert failure.code == OutcomeCode.CHILD_ID_TAKEN


def test_a_child_whose_definition_is_not_registered_fails_the_parents_step() -> None:
    start = StartChild(
        execution_id="p-1:kid",
        definition_hash="sha256:nothing",
        parent="p-1:kid",
        parent_execution_id="p-1",
        parent_token="p-1:kid:1",
    )
    decided = plan(ExecutionState(), [start], Facts(), now=NOW, policy=Policy(), topology=TOPOLOGY)
    assert decided is not None
    assert decided.events == []
    [answer] = [m.message for m in decided.messages]
    assert isinstance(answer, TaskResult)
    assert answer.error is not None
    assert answer.error.code == ErrorCode.CHILD_NOT_REGISTERED
    assert decided.messages[0].route == TOPOLOGY.decider_route("p-1")


# -- the calls no worker may take --

HTTP = """
steps:
  - id: call
    http: {method: GET, url: "https://example.test/"}
    retry: {max_attempts: 3}
    continue_on_error: true
  - id: after
    task: t
    after: [call]
tasks: {t: {version: "1"}}
"""


def test_an_http_step_fails_at_once_while_the_adapter_is_off() -> None:
    sim = Simulator.from_yaml(
        HEAD + "workflow: w\n" + HTTP, {"t": lambda _i, _d: 1}, http_adapter_enabled=False
    )
    sim.start()
    failed = [e for e in sim.history if isinstance(e, StepFailed)]
    assert [(e.unit, e.error.code, e.error.retryable) for e in failed] == [
        ("call", OutcomeCode.ADAPTER_DISABLED, False)
    ]
    assert not any(isinstance(e, RetryScheduled) for e in sim.history)  # not retried
    assert not any(
        isinstance(m.message, TaskAssignment) and m.message.unit == "call" for m in sim.outbox
    )
    assert sim.run().status == "completed"  # the steps after it go on


def test_with_the_adapter_on_an_http_step_goes_to_its_queue() -> None:
    sim = Simulator.from_yaml(HEAD + "workflow: w\n" + HTTP, {}, http_adapter_enabled=True)
    sim.start()
    [assignment] = [m for m in sim.outbox if isinstance(m.message, TaskAssignment)]
    assert assignment.route == TOPOLOGY.task_route("orbit.http.request", "1")


# -- results that cannot be stored --

ONE = """
tasks: {t: {version: "1"}}
steps:
  - id: a
    task: t
    retry: {max_attempts: 3}
"""


def _answered(output: Any = None, error: TaskFailure | None = None, **policy: Any) -> Simulator:
    sim = Simulator.from_yaml(HEAD + "workflow: w\n" + ONE, {}, **policy)
    sim.start()
    sim.result("e-1:a:1", output, error)
    return sim


def test_an_output_with_a_nul_or_a_lone_surrogate_fails_the_attempt_for_good() -> None:
    for output in ({"x": "a\x00b"}, {"x": "\ud800"}, {"\x00": 1}):
        sim = _answered(output)
        [failed] = [e for e in sim.history if isinstance(e, StepAttemptFailed)]
        assert (failed.error.code, failed.error.retryable) == (OutcomeCode.INVALID_OUTPUT, False)
        assert sim.state.status == "failed"


def test_an_output_over_the_payload_limit_fails_with_payload_too_large() -> None:
    sim = _answered({"x": "y" * 100}, max_payload_bytes=50)
    [failed] = [e for e in sim.history if isinstance(e, StepAttemptFailed)]
    assert failed.error.code == ErrorCode.PAYLOAD_TOO_LARGE
    assert "(ORBIT_MAX_PAYLOAD_BYTES)" in failed.error.message
    assert _answered({"x": "y" * 10}, max_payload_bytes=50).state.status == "completed"


def test_an_error_that_cannot_be_stored_keeps_its_code_and_its_retry() -> None:
    error = TaskFailure(code="BO\x00OM", message="bad\x00", retryable=True)
    sim = _answered(error=error)
    [failed] = [e for e in sim.history if isinstance(e, StepAttemptFailed)]
    assert (failed.error.code, failed.error.retryable) == ("BOOM", True)
    assert failed.error.message.startswith("the worker's error could not be stored")
    assert any(isinstance(e, RetryScheduled) for e in sim.history)


def test_a_storable_result_is_kept_as_it_is() -> None:
    result = TaskResult(execution_id="e", token="t", output={"ok": [1, 2.5, "ü"]})
    assert storable_result(result, None) == ({"ok": [1, 2.5, "ü"]}, None)


def test_a_workers_error_says_where_it_happened_only_through_the_engine() -> None:
    sim = Simulator.from_yaml(
        HEAD + "workflow: w\ntasks: {t: {version: '1'}}\nsteps:\n  - id: a\n    task: t\n",
        {},
    )
    sim.start()
    inner = TaskFailure(code="UPSTREAM", message="the bank said no")
    forged = inner.model_copy(update={"step": "charge", "execution_id": "someone-elses"})
    sent = TaskFailure(
        code="DECLINED", message="no", step="elsewhere", execution_id="e-9", cause=forged
    )
    sim.result(sim.state.unit("a").token or "", error=sent)
    recorded = next(e for e in sim.history if isinstance(e, StepAttemptFailed)).error
    assert recorded == TaskFailure(code="DECLINED", message="no", cause=inner)


def test_a_workers_error_is_held_to_the_limits_of_an_output() -> None:
    chain: TaskFailure | None = None
    for level in range(40):
        chain = TaskFailure(code=f"L{level}", message="m", cause=chain)
    assert chain is not None
    result = TaskResult(execution_id="e", token="t", error=chain)
    _, deep = storable_result(result, None, max_depth=20)
    assert deep is not None
    assert deep.cause is None
    assert "nested deeper than 20 levels" in deep.message
    big = TaskFailure(code="BIG", message="m", details={"blob": "x" * 5000})
    _, large = storable_result(TaskResult(execution_id="e", token="t", error=big), 1000)
    assert large is not None
    assert (large.code, large.details) == ("BIG", None)
    assert "ORBIT_MAX_PAYLOAD_BYTES" in large.message


# -- timers and refusals --


def test_a_firing_that_comes_early_puts_its_timer_back() -> None:
    sim = Simulator.from_yaml(HEAD + "workflow: w\nsteps:\n  - id: nap\n    sleep: 10s\n", {})
    sim.start()
    due = sim.state.timers["timer:nap"]
    early = TimerDue(execution_id="e-1", key="timer:nap", due_at=due - 5_000)
    decided = plan(
        sim.state,
        [early],
        Facts(definition=sim.definition),
        now=due - 5_000,
        policy=Policy(),
        topology=TOPOLOGY,
    )
    assert decided is not None
    assert decided.events == []
    assert decided.refired == ["timer:nap"]
    assert decided.writes
    assert "timer:nap" not in decided.timers_before  # so the append writes it again


def test_a_firing_dated_far_ahead_is_believed_only_a_little() -> None:
    """A forged TimerDue dated an hour ahead fired a one-hour sleep at once; a timer
    service's clock a few seconds ahead of the decider's is still believed."""
    sim = Simulator.from_yaml(HEAD + "workflow: w\nsteps:\n  - id: nap\n    sleep: 1h\n", {})
    sim.start()
    due = sim.state.timers["timer:nap"]
    now = due - 3_600_000 + 1_000

    def fired(due_at: int, at: int) -> list[str]:
        firing = TimerDue(execution_id="e-1", key="timer:nap", due_at=due_at)
        facts = Facts(definition=sim.definition)
        decided = plan(sim.state, [firing], facts, now=at, policy=Policy(), topology=TOPOLOGY)
        assert decided is not None
        return [type(event).__name__ for event in decided.events]

    assert "TimerFired" not in fired(due + 3_600_000, now)
    assert "TimerFired" not in fired(due, due - MAX_CLOCK_SKEW_MS - 1)
    assert "TimerFired" in fired(due, due - MAX_CLOCK_SKEW_MS)


def test_an_input_the_execution_refuses_is_reported_not_raised() -> None:
    sim = Simulator.from_yaml(HEAD + "workflow: w\n" + ONE, {})
    sim.start()
    sim.result("e-1:a:1", "done")
    assert sim.state.status == "completed"
    late = TaskResult(execution_id="e-1", token="e-1:nope:1", output=1)
    decided = plan(
        sim.state,
        [late],
        Facts(definition=sim.definition),
        now=NOW,
        policy=Policy(),
        topology=TOPOLOGY,
    )
    assert decided is not None
    assert [error.code for _, error in decided.refused] in ([], [ErrorCode.EXECUTION_FINISHED])


def test_an_input_for_an_execution_that_does_not_exist_plans_nothing() -> None:
    decided = plan(
        ExecutionState(),
        [Wake(execution_id="ghost")],
        Facts(),
        now=NOW,
        policy=Policy(),
        topology=TOPOLOGY,
    )
    assert decided is None


def test_a_task_message_carries_the_attempts_traceparent() -> None:
    sim = Simulator.from_yaml(HEAD + "workflow: w\n" + ONE, {})
    sim.start()
    [outgoing] = sim.outbox
    assert isinstance(outgoing.message, TaskAssignment)
    assert outgoing.headers is not None
    assert outgoing.headers["traceparent"].startswith("00-")
    dispatched = [e for e in sim.history if isinstance(e, StepDispatched)]
    assert outgoing.message.token == dispatched[0].token
    assert outgoing.message.idempotency_key == "e-1:a"
    assert outgoing.message.result_route == TOPOLOGY.results_route("e-1")


def test_a_long_childs_id_is_cut_with_a_digest_the_same_for_its_first_attempt_as_ever() -> None:
    import hashlib  # noqa: PLC0415

    parent = "p" * 199
    first = child_execution_id(parent, "kid")
    # The form child ids had before each retry ran a child of its own.
    digest = hashlib.sha256(f"{parent}\0kid".encode()).hexdigest()[:40]
    assert first == f"{(parent + ':kid')[:150]}:{digest}"
    second = child_execution_id(parent, "kid", 2)
    assert len(second) <= 200
    assert second != first


def test_a_parked_firing_puts_its_timer_back() -> None:
    """A chaos run left executions running for good: the timer service had deleted a
    timer's row and its TimerDue was parked. The report of it re-arms every timer the
    execution still wants that is due, and records the loss."""
    sim = Simulator.from_yaml(HEAD + "workflow: w\nsteps:\n  - id: nap\n    sleep: 10s\n", {})
    sim.start()
    due = sim.state.timers["timer:nap"]
    parked = MessageParked(
        execution_id="e-1", message_type="TimerDue", reason="rejected", detail="timer timer:nap"
    )
    decided = plan(
        sim.state,
        [parked],
        Facts(definition=sim.definition),
        now=due + 1_000,
        policy=Policy(),
        topology=TOPOLOGY,
    )
    assert decided is not None
    assert [type(event).__name__ for event in decided.events] == ["MessageLost"]
    assert decided.refired == ["timer:nap"]
    assert "timer:nap" not in decided.timers_before  # so the append writes it again
    before_due = plan(
        sim.state,
        [parked],
        Facts(definition=sim.definition),
        now=due - 1_000,
        policy=Policy(),
        topology=TOPOLOGY,
    )
    assert before_due is not None
    assert before_due.refired == []  # its row is still there, to fire when due
