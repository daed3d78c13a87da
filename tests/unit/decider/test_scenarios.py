"""One scenario per behaviour of the decider, each asserting the exact events it produces.

Every scenario is a small inline workflow driven through the simulator one
input at a time (a result, a timer, a lost worker, a signal, a cancel), so
each slice of the history can be written out in full. The clock starts at
``T0`` and only moves when a test moves it.
"""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from orbit_model import compile_definition
from orbit_model.decider import Limits, decide, decide_until_stable
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.events import (
    CancelRequested,
    CompensationOutcome,
    CompensationStarted,
    Event,
    LimitExceeded,
    RetryScheduled,
    SignalReceived,
    StaleResultIgnored,
    StepAttemptFailed,
    StepAttemptUncertain,
    StepCancelled,
    StepDispatched,
    StepFailed,
    StepFanOut,
    StepScheduled,
    StepSkipped,
    StepSucceeded,
    TaskFailure,
    TimerFired,
    TimerStarted,
    WorkflowCancelled,
    WorkflowCompleted,
    WorkflowCreated,
    WorkflowFailed,
    WorkflowStarted,
    WorkflowTimedOut,
    event_from_json,
    event_to_json,
    events_from_json,
)
from orbit_model.inputs import (
    accept_attempt_timeout,
    accept_cancel,
    accept_lost_delivery,
    accept_result,
    accept_signal,
    accept_timer,
    start_execution,
)
from orbit_model.outcome_codes import OutcomeCode
from orbit_model.plan import Policy
from orbit_model.queries import evaluate_query, projected
from orbit_model.state import ExecutionState, UnitStatus, evolve, replay

from .simulator import Crash, Fail, Hang, Simulator

T0 = 1_000_000
SECOND = 1000
MINUTE = 60 * SECOND
HEAD = "orbit: 1\nworkflow: w\nversion: 1.0.0\n"


# -- building expected events --


def make(body: str, workers: dict[str, Any] | None = None, **options: Any) -> Simulator:
    """A simulator for ``HEAD`` + ``body`` (dedented YAML)."""
    return Simulator.from_yaml(HEAD + textwrap.dedent(body), workers or {}, **options)


def tok(unit: str, n: int = 1) -> str:
    """The token of the ``n``-th delivery of ``unit`` in execution ``e-1``."""
    return f"e-1:{unit}:{n}"


def created(input: Any = None) -> WorkflowCreated:
    return WorkflowCreated(
        execution_id="e-1",
        workflow="w",
        version="1.0.0",
        definition_hash="sha256:test",
        input=input,
    )


def scheduled(unit: str, input: Any = None) -> StepScheduled:
    return StepScheduled(unit=unit, input=input)


def dispatched(
    unit: str,
    attempt: int = 1,
    n: int | None = None,
    *,
    redelivery: bool = False,
    timeout_at: int | None = None,
) -> StepDispatched:
    return StepDispatched(
        unit=unit,
        attempt=attempt,
        token=tok(unit, n if n is not None else attempt),
        redelivery=redelivery,
        timeout_at=timeout_at,
    )


def succeeded(
    unit: str, output: Any = None, attempt: int = 1, signal: int | None = None
) -> StepSucceeded:
    return StepSucceeded(unit=unit, output=output, attempt=attempt, signal=signal)


def err(code: str, message: str = "failed", retryable: bool = True) -> TaskFailure:
    """An error as a worker reports it."""
    return TaskFailure(code=code, message=message, retryable=retryable)


def orbit_err(code: ErrorCode, message: str, retryable: bool = False) -> TaskFailure:
    """An error Orbit itself reports."""
    return TaskFailure(code=code.value, message=message, retryable=retryable)


def step_error(step: str, error: TaskFailure) -> TaskFailure:
    """The execution's error when ``step`` failed for good with ``error``: the step's
    error is its cause, saying where it happened."""
    return TaskFailure(
        code=error.code,
        message=f"step {step!r} failed: {error.message}",
        retryable=False,
        details={"step": step, "code": error.code},
        cause=error.caused_by(step, "e-1"),
    )


def fails_with(step: str, error: TaskFailure, compensation: CompensationOutcome = "none") -> list:
    """The end of an execution that stops on ``step``'s failure with nothing in flight."""
    failure = step_error(step, error)
    return [
        CompensationStarted(cause="failed", error=failure),
        WorkflowFailed(error=failure, compensation=compensation),
    ]


def since(sim: Simulator, mark: int) -> list[Event]:
    return sim.history[mark:]


def max_in_flight(history: list[Event], prefix: str) -> int:
    """The most units whose key starts with ``prefix`` that were active at once."""
    active: set[str] = set()
    peak = 0
    for event in history:
        unit = getattr(event, "unit", None)
        if unit is None or not unit.startswith(prefix):
            continue
        if isinstance(event, StepScheduled | StepDispatched | RetryScheduled):
            active.add(unit)
        elif isinstance(event, StepSucceeded | StepFailed | StepCancelled | StepSkipped):
            active.discard(unit)
        peak = max(peak, len(active))
    return peak


# -- the DAG -------------------------------------------------------------------

DAG = """
tasks:
  t: {version: "1"}
steps:
  - id: a
    task: t
    input: {x: 1}
  - id: b
    task: t
    input:
      prev: ${ steps.a.output }
  - id: c
    task: t
    after: []
    input: {n: 2}
  - id: d
    task: t
    after: [b, c]
    input:
      b: ${ steps.b.output }
      c: ${ steps.c.output }
"""


def test_dag_steps_start_when_their_dependencies_are_done() -> None:
    sim = make(DAG)
    sim.start()
    assert sim.history == [
        created(),
        WorkflowStarted(),
        scheduled("a", {"x": 1}),
        scheduled("c", {"n": 2}),
        dispatched("a"),
        dispatched("c"),
    ]
    assert sim.result(tok("a"), {"ra": 1}) == [
        succeeded("a", {"ra": 1}),
        scheduled("b", {"prev": {"ra": 1}}),
        dispatched("b"),
    ]
    # d waits for b as well as c.
    assert sim.result(tok("c"), {"rc": 2}) == [succeeded("c", {"rc": 2})]
    assert sim.result(tok("b"), {"rb": 3}) == [
        succeeded("b", {"rb": 3}),
        scheduled("d", {"b": {"rb": 3}, "c": {"rc": 2}}),
        dispatched("d"),
    ]
    # The default output is the last step's output.
    assert sim.result(tok("d"), {"rd": 4}) == [
        succeeded("d", {"rd": 4}),
        WorkflowCompleted(output={"rd": 4}),
    ]
    assert sim.state.status == "completed"
    assert sim.state.output == {"rd": 4}


def test_inputs_are_evaluated_when_the_unit_is_scheduled() -> None:
    sim = make(
        """
        signals: {note: {}}
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
          - id: b
            task: t
            input:
              note: ${ signals.note }
              a: ${ steps.a.output }
        """
    )
    sim.start()
    sim.signal("note", "first")
    mark = len(sim.history)
    sim.signal("note", "second")
    assert since(sim, mark) == [SignalReceived(name="note", payload="second")]
    # b's input is fixed when b is scheduled: the last payload by then, a's output.
    assert sim.result(tok("a"), 7) == [
        succeeded("a", 7),
        scheduled("b", {"note": "second", "a": 7}),
        dispatched("b"),
    ]
    mark = len(sim.history)
    sim.signal("note", "third")
    assert since(sim, mark) == [SignalReceived(name="note", payload="third")]
    assert sim.state.unit("b").input == {"note": "second", "a": 7}


def test_if_false_skips_and_a_step_whose_dependencies_were_all_skipped_is_skipped() -> None:
    sim = make(
        """
        input:
          type: object
          properties: {run: {type: boolean}}
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            if: ${ input.run }
            task: t
          - id: b
            task: t
          - id: c
            task: t
            after: [b]
            input:
              a: ${ steps.a.output }
              status: ${ steps.a.status }
          - id: d
            if: false
            task: t
            after: []
          - id: e
            task: t
        output:
          c: ${ steps.c.output }
          e: ${ steps.e.output }
          e_status: ${ steps.e.status }
        """
    )
    sim.start({"run": False})
    assert sim.history == [
        created({"run": False}),
        WorkflowStarted(),
        StepSkipped(unit="a", reason="its if was false"),
        StepSkipped(unit="d", reason="its if was false"),
        # b depends (by default) on a alone; e on d alone.
        StepSkipped(unit="b", reason="every step it depends on was skipped"),
        StepSkipped(unit="e", reason="every step it depends on was skipped"),
        # c names b explicitly: it runs, and sees a's output as null.
        scheduled("c", {"a": None, "status": "skipped"}),
        dispatched("c"),
    ]
    assert sim.result(tok("c"), "done") == [
        succeeded("c", "done"),
        WorkflowCompleted(output={"c": "done", "e": None, "e_status": "skipped"}),
    ]


def test_a_step_runs_when_only_some_of_its_dependencies_were_skipped() -> None:
    sim = make(
        """
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            if: false
            task: t
          - id: b
            task: t
            after: []
          - id: c
            task: t
            after: [a, b]
        """
    )
    sim.start()
    assert sim.history[2:] == [
        StepSkipped(unit="a", reason="its if was false"),
        scheduled("b"),
        dispatched("b"),
    ]
    assert sim.result(tok("b"), 1) == [succeeded("b", 1), scheduled("c"), dispatched("c")]
    # The default output is the output of the last step: c.
    assert sim.result(tok("c"), 2) == [succeeded("c", 2), WorkflowCompleted(output=2)]


def test_the_workflow_output_is_evaluated_at_the_end() -> None:
    sim = make(
        """
        signals: {tag: {}}
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
          - id: b
            task: t
            after: []
        output:
          sum: ${ steps.a.output + steps.b.output }
          tag: ${ signals.tag }
        """
    )
    sim.start()
    assert sim.result(tok("a"), 1) == [succeeded("a", 1)]
    sim.signal("tag", "late")
    assert sim.result(tok("b"), 2) == [
        succeeded("b", 2),
        WorkflowCompleted(output={"sum": 3, "tag": "late"}),
    ]


# -- for --

FAN_OUT = """
tasks:
  t: {version: "1"}
steps:
  - id: ship
    for: ${ input.items }
    concurrency: 2
    task: t
    retry: {max_attempts: 2, initial_interval: 1s}
    input:
      item: ${ item }
      index: ${ index }
"""


def test_for_fans_out_within_its_concurrency_and_keeps_outputs_in_order() -> None:
    sim = make(FAN_OUT)
    sim.start({"items": ["a", "b", "c", "d"]})
    assert sim.history[2:] == [
        StepFanOut(unit="ship", items=["a", "b", "c", "d"]),
        scheduled("ship[0]", {"item": "a", "index": 0}),
        scheduled("ship[1]", {"item": "b", "index": 1}),
        dispatched("ship[0]"),
        dispatched("ship[1]"),
    ]
    assert sim.result(tok("ship[1]"), "B") == [
        succeeded("ship[1]", "B"),
        scheduled("ship[2]", {"item": "c", "index": 2}),
        dispatched("ship[2]"),
    ]
    assert sim.result(tok("ship[2]"), "C") == [
        succeeded("ship[2]", "C"),
        scheduled("ship[3]", {"item": "d", "index": 3}),
        dispatched("ship[3]"),
    ]
    assert sim.result(tok("ship[3]"), "D") == [succeeded("ship[3]", "D")]
    assert sim.result(tok("ship[0]"), "A") == [
        succeeded("ship[0]", "A"),
        StepSucceeded(unit="ship", output=["A", "B", "C", "D"]),
        WorkflowCompleted(output=["A", "B", "C", "D"]),
    ]
    assert max_in_flight(sim.history, "ship[") == 2


def test_for_never_exceeds_its_concurrency_with_retries_and_lost_workers() -> None:
    lost = {"ship[1]", "ship[4]"}
    flaky = {"ship[2]", "ship[3]"}

    def worker(value: dict[str, Any], delivery: Any) -> Any:
        if delivery.unit in lost:
            lost.discard(delivery.unit)
            raise Crash
        if delivery.unit in flaky:
            flaky.discard(delivery.unit)
            raise Fail("FLAKY", "try again")
        return value["item"] * 10

    sim = make(FAN_OUT, {"t": worker})
    sim.start({"items": [1, 2, 3, 4, 5, 6]})
    sim.run()
    assert sim.state.status == "completed"
    assert sim.state.output == [10, 20, 30, 40, 50, 60]
    assert max_in_flight(sim.history, "ship[") == 2


def test_a_failed_element_fails_the_step_and_cancels_the_others() -> None:
    sim = make(FAN_OUT.replace("concurrency: 2", "concurrency: 3"))
    sim.start({"items": [1, 2, 3, 4]})
    assert sim.history[-3:] == [dispatched("ship[0]"), dispatched("ship[1]"), dispatched("ship[2]")]
    flaky = err("FLAKY", "boom")
    assert sim.result(tok("ship[1]"), error=flaky) == [
        StepAttemptFailed(unit="ship[1]", attempt=1, error=flaky),
        RetryScheduled(unit="ship[1]", next_attempt=2, due_at=T0 + SECOND),
    ]
    assert sim.fire("retry:ship[1]", at=T0 + SECOND) == [
        TimerFired(key="retry:ship[1]"),
        dispatched("ship[1]", attempt=2),
    ]
    # The step's error names the element it came from, and so does the chain's cause.
    in_element = flaky.caused_by("ship[1]")
    failure = step_error("ship", in_element)
    assert failure.cause is not None
    assert failure.cause.step == "ship[1]"
    assert sim.result(tok("ship[1]", 2), error=flaky) == [
        StepAttemptFailed(unit="ship[1]", attempt=2, error=flaky),
        StepFailed(unit="ship[1]", error=flaky),
        StepFailed(unit="ship", error=in_element),
        StepCancelled(unit="ship[0]"),
        StepCancelled(unit="ship[2]"),
        CompensationStarted(cause="failed", error=failure),
        WorkflowFailed(error=failure, compensation="none"),
    ]
    # ship[3] never started.
    assert "ship[3]" not in sim.state.units


def test_for_over_an_empty_list_gives_an_empty_list() -> None:
    sim = make(FAN_OUT)
    sim.start({"items": []})
    assert sim.history[2:] == [
        StepFanOut(unit="ship", items=[]),
        StepSucceeded(unit="ship", output=[], attempt=0),
        WorkflowCompleted(output=[]),
    ]


def test_for_over_a_non_list_fails_with_invalid_fan_out() -> None:
    sim = make(FAN_OUT)
    sim.start({"items": {"a": 1}})
    error = orbit_err(OutcomeCode.INVALID_FAN_OUT, "for must give a list, not dict")
    assert sim.history[2:] == [StepFailed(unit="ship", error=error), *fails_with("ship", error)]
    assert sim.state.error is not None
    assert sim.state.error.code == "INVALID_FAN_OUT"


def test_for_beyond_the_fan_out_limit_fails_with_limit_exceeded() -> None:
    sim = make(FAN_OUT, limits=Limits(max_fan_out=3))
    sim.start({"items": [1, 2, 3, 4]})
    error = orbit_err(
        OutcomeCode.LIMIT_EXCEEDED, "for over 4 elements exceeds the fan-out limit of 3"
    )
    assert sim.history[2:] == [StepFailed(unit="ship", error=error), *fails_with("ship", error)]


def test_for_at_the_fan_out_limit_runs() -> None:
    sim = make(FAN_OUT, {"t": lambda value, _d: value["item"]}, limits=Limits(max_fan_out=3))
    sim.start({"items": [1, 2, 3]})
    assert sim.history[2] == StepFanOut(unit="ship", items=[1, 2, 3])
    sim.run()
    assert sim.state.output == [1, 2, 3]


# -- await --

AWAITS = """
signals:
  go: {}
  other: {}
tasks:
  t: {version: "1"}
steps:
  - id: first
    task: t
  - id: w1
    await: go
  - id: w2
    await: go
"""


def test_await_takes_buffered_signals_oldest_first() -> None:
    sim = make(AWAITS)
    sim.start()
    sim.signal("go", {"n": 1})
    sim.signal("other", {"n": 0})
    sim.signal("go", {"n": 2})
    sim.signal("go", {"n": 3})
    assert sim.result(tok("first"), "ok") == [
        succeeded("first", "ok"),
        scheduled("w1"),
        StepSucceeded(unit="w1", output={"n": 1}, signal=0),
        scheduled("w2"),
        StepSucceeded(unit="w2", output={"n": 2}, signal=2),
        WorkflowCompleted(output={"n": 2}),
    ]
    assert [signal.taken_by for signal in sim.state.signals] == ["w1", None, "w2", None]


def test_await_waits_for_its_signal() -> None:
    sim = make(AWAITS)
    sim.start()
    assert sim.result(tok("first"), "ok") == [succeeded("first", "ok"), scheduled("w1")]
    mark = len(sim.history)
    sim.signal("other", "not this one")
    assert since(sim, mark) == [SignalReceived(name="other", payload="not this one")]
    mark = len(sim.history)
    sim.signal("go", "yes")
    assert since(sim, mark) == [
        SignalReceived(name="go", payload="yes"),
        StepSucceeded(unit="w1", output="yes", signal=1),
        scheduled("w2"),
    ]
    mark = len(sim.history)
    sim.signal("go", "again")
    assert since(sim, mark) == [
        SignalReceived(name="go", payload="again"),
        StepSucceeded(unit="w2", output="again", signal=2),
        WorkflowCompleted(output="again"),
    ]


PARALLEL_AWAITS = """
signals: {go: {}}
tasks:
  t: {version: "1"}
steps:
  - id: first
    task: t
  - id: w1
    await: go
    after: [first]
  - id: w2
    await: go
    after: [first]
  - id: done
    task: t
    after: [w1, w2]
    input:
      w1: ${ steps.w1.output }
      w2: ${ steps.w2.output }
"""


def test_parallel_awaits_waiting_for_one_signal_take_one_each() -> None:
    sim = make(PARALLEL_AWAITS)
    sim.start()
    assert sim.result(tok("first"), "ok") == [
        succeeded("first", "ok"),
        scheduled("w1"),
        scheduled("w2"),
    ]
    mark = len(sim.history)
    sim.signal("go", "one")
    # One signal is taken by one await: the other keeps waiting.
    assert since(sim, mark) == [
        SignalReceived(name="go", payload="one"),
        StepSucceeded(unit="w1", output="one", signal=0),
    ]
    mark = len(sim.history)
    sim.signal("go", "two")
    assert since(sim, mark) == [
        SignalReceived(name="go", payload="two"),
        StepSucceeded(unit="w2", output="two", signal=1),
        scheduled("done", {"w1": "one", "w2": "two"}),
        dispatched("done"),
    ]


def test_parallel_awaits_take_distinct_buffered_signals() -> None:
    sim = make(PARALLEL_AWAITS)
    sim.start()
    sim.signal("go", "one")
    sim.signal("go", "two")
    assert sim.result(tok("first"), "ok") == [
        succeeded("first", "ok"),
        scheduled("w1"),
        scheduled("w2"),
        StepSucceeded(unit="w1", output="one", signal=0),
        StepSucceeded(unit="w2", output="two", signal=1),
        scheduled("done", {"w1": "one", "w2": "two"}),
        dispatched("done"),
    ]


def test_an_await_timeout_fails_the_step_with_timeout() -> None:
    sim = make(
        """
        signals: {go: {}}
        steps:
          - id: w
            await: go
            timeout: 5m
        """
    )
    sim.start()
    due = T0 + 5 * MINUTE
    assert sim.history[2:] == [scheduled("w"), TimerStarted(unit="w", due_at=due)]
    assert sim.state.timers == {"timer:w": due}
    # Early: nothing happens.
    assert sim.fire("timer:w", at=due - 1) == []
    error = orbit_err(ErrorCode.TIMEOUT, "no signal 'go' within 300000 ms")
    assert sim.fire("timer:w", at=due) == [
        TimerFired(key="timer:w"),
        StepFailed(unit="w", error=error),
        *fails_with("w", error),
    ]


def test_a_signal_before_the_await_timeout_wins() -> None:
    sim = make(
        """
        signals: {go: {}}
        steps:
          - id: w
            await: go
            timeout: 5m
        """
    )
    sim.start()
    sim.now = T0 + MINUTE
    mark = len(sim.history)
    sim.signal("go", 1)
    assert since(sim, mark) == [
        SignalReceived(name="go", payload=1),
        StepSucceeded(unit="w", output=1, signal=0),
        WorkflowCompleted(output=1),
    ]
    assert sim.state.timers == {}


# -- sleep --


def test_sleep_starts_a_timer_and_succeeds_when_it_fires() -> None:
    sim = make(
        """
        tasks:
          t: {version: "1"}
        steps:
          - id: nap
            sleep: 10m
          - id: after
            task: t
            input:
              nap: ${ steps.nap.output }
        """
    )
    sim.start()
    due = T0 + 10 * MINUTE
    assert sim.history[2:] == [scheduled("nap"), TimerStarted(unit="nap", due_at=due)]
    assert sim.state.timers == {"timer:nap": due}
    # A timer fired early does nothing.
    assert accept_timer(sim.state, "timer:nap", due - 1) == []
    assert sim.fire("timer:nap", at=due - 1) == []
    assert sim.state.unit("nap").status is UnitStatus.SCHEDULED
    assert sim.fire("timer:nap", at=due) == [
        TimerFired(key="timer:nap"),
        StepSucceeded(unit="nap", output=None, attempt=0),
        scheduled("after", {"nap": None}),
        dispatched("after"),
    ]
    # A repeated firing adds nothing.
    assert sim.fire("timer:nap") == []


# -- child workflows and http --


def test_child_workflow_and_http_steps_are_dispatched_as_tasks() -> None:
    seen: list[tuple[str, Any]] = []

    def child(value: Any, delivery: Any) -> Any:
        seen.append(("child", delivery))
        return {"invoice": "inv-1"}

    def http(value: Any, delivery: Any) -> Any:
        seen.append(("http", delivery))
        return {"status": 204}

    sim = make(
        """
        tasks: {}
        steps:
          - id: invoice
            workflow: send-invoice@1.0.0
            input:
              order: ${ input.order }
          - id: hook
            http:
              method: post
              url: https://example.test/hook
              headers: {content-type: application/json}
              body:
                order: ${ input.order }
                invoice: ${ steps.invoice.output.invoice }
              timeout: 10s
        """,
        {"workflow:send-invoice": child, "orbit.http.request": http},
    )
    sim.start({"order": "o-1"})
    assert sim.history[2:] == [scheduled("invoice", {"order": "o-1"}), dispatched("invoice")]
    sim.run()
    assert sim.history[4:] == [
        succeeded("invoice", {"invoice": "inv-1"}),
        scheduled(
            "hook",
            {
                "method": "POST",
                "url": "https://example.test/hook",
                "headers": {"content-type": "application/json"},
                "body": {"order": "o-1", "invoice": "inv-1"},
                "timeout_ms": 10_000,
            },
        ),
        dispatched("hook"),
        succeeded("hook", {"status": 204}),
        WorkflowCompleted(output={"status": 204}),
    ]
    assert [(kind, delivery.unit, delivery.token) for kind, delivery in seen] == [
        ("child", "invoice", tok("invoice")),
        ("http", "hook", tok("hook")),
    ]


def test_a_child_workflow_is_not_retried_without_its_own_retry() -> None:
    sim = make(
        """
        steps:
          - id: invoice
            workflow: send-invoice@1.0.0
        """
    )
    sim.start()
    error = err("CHILD_FAILED", "the child failed")
    assert sim.result(tok("invoice"), error=error) == [
        StepAttemptFailed(unit="invoice", attempt=1, error=error),
        StepFailed(unit="invoice", error=error),
        *fails_with("invoice", error),
    ]


# -- retries --

RETRIED = """
tasks:
  t: {version: "1"}
steps:
  - id: a
    task: t
    retry:
      max_attempts: 4
      initial_interval: 1s
      backoff: 3
      max_interval: 5s
      non_retryable: [CARD_DECLINED]
"""


def test_retries_back_off_exponentially_up_to_the_cap_then_fail() -> None:
    sim = make(RETRIED)
    sim.start()
    flaky = err("FLAKY", "try again")
    # The failure arrives 200 ms after dispatch: the delay counts from then.
    sim.now = T0 + 200
    assert sim.result(tok("a"), error=flaky) == [
        StepAttemptFailed(unit="a", attempt=1, error=flaky),
        RetryScheduled(unit="a", next_attempt=2, due_at=T0 + 200 + 1000),
    ]
    assert sim.state.timers == {"retry:a": T0 + 1200}
    assert sim.fire("retry:a", at=T0 + 1199) == []
    assert sim.fire("retry:a", at=T0 + 1200) == [
        TimerFired(key="retry:a"),
        dispatched("a", attempt=2),
    ]
    assert sim.result(tok("a", 2), error=flaky) == [
        StepAttemptFailed(unit="a", attempt=2, error=flaky),
        RetryScheduled(unit="a", next_attempt=3, due_at=T0 + 1200 + 3000),
    ]
    assert sim.fire("retry:a", at=T0 + 4200) == [
        TimerFired(key="retry:a"),
        dispatched("a", attempt=3),
    ]
    # 1 s x 3^2 = 9 s, capped at 5 s.
    assert sim.result(tok("a", 3), error=flaky) == [
        StepAttemptFailed(unit="a", attempt=3, error=flaky),
        RetryScheduled(unit="a", next_attempt=4, due_at=T0 + 4200 + 5000),
    ]
    assert sim.fire("retry:a", at=T0 + 9200) == [
        TimerFired(key="retry:a"),
        dispatched("a", attempt=4),
    ]
    # max_attempts reached.
    assert sim.result(tok("a", 4), error=flaky) == [
        StepAttemptFailed(unit="a", attempt=4, error=flaky),
        StepFailed(unit="a", error=flaky),
        *fails_with("a", flaky),
    ]


def test_a_non_retryable_code_fails_the_step_at_once() -> None:
    sim = make(RETRIED)
    sim.start()
    declined = err("CARD_DECLINED", "declined")
    assert sim.result(tok("a"), error=declined) == [
        StepAttemptFailed(unit="a", attempt=1, error=declined),
        StepFailed(unit="a", error=declined),
        *fails_with("a", declined),
    ]


def test_an_error_the_worker_marks_non_retryable_fails_the_step_at_once() -> None:
    sim = make(RETRIED)
    sim.start()
    fatal = err("BAD_REQUEST", "never", retryable=False)
    assert sim.result(tok("a"), error=fatal) == [
        StepAttemptFailed(unit="a", attempt=1, error=fatal),
        StepFailed(unit="a", error=fatal),
        *fails_with("a", fatal),
    ]


def test_a_retry_succeeds() -> None:
    sim = make(RETRIED)
    sim.start()
    flaky = err("FLAKY")
    sim.result(tok("a"), error=flaky)
    sim.fire("retry:a", at=T0 + SECOND)
    assert sim.result(tok("a", 2), "ok") == [
        succeeded("a", "ok", attempt=2),
        WorkflowCompleted(output="ok"),
    ]


def test_the_default_retry_policy() -> None:
    sim = make(
        """
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
        """
    )
    sim.start()
    flaky = err("FLAKY")
    assert sim.result(tok("a"), error=flaky)[-1] == RetryScheduled(
        unit="a", next_attempt=2, due_at=T0 + 1000
    )
    sim.fire("retry:a", at=T0 + 1000)
    assert sim.result(tok("a", 2), error=flaky)[-1] == RetryScheduled(
        unit="a", next_attempt=3, due_at=T0 + 1000 + 2000
    )
    sim.fire("retry:a", at=T0 + 3000)
    assert sim.result(tok("a", 3), error=flaky)[:2] == [
        StepAttemptFailed(unit="a", attempt=3, error=flaky),
        StepFailed(unit="a", error=flaky),
    ]


# -- timeouts --


def test_an_attempt_timeout_fails_the_attempt_with_timeout_and_retries() -> None:
    sim = make(
        """
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            timeout: 30s
            retry: {max_attempts: 2, initial_interval: 1s}
        """
    )
    sim.start()
    assert sim.history[2:] == [scheduled("a"), dispatched("a", timeout_at=T0 + 30 * SECOND)]
    assert sim.state.timers == {f"timeout:{tok('a')}": T0 + 30 * SECOND}
    assert sim.fire(f"timeout:{tok('a')}", at=T0 + 30 * SECOND - 1) == []
    timeout = orbit_err(ErrorCode.TIMEOUT, "no result within the step timeout of 30000 ms", True)
    assert sim.fire(f"timeout:{tok('a')}", at=T0 + 30 * SECOND) == [
        TimerFired(key=f"timeout:{tok('a')}"),
        StepAttemptFailed(unit="a", attempt=1, error=timeout),
        RetryScheduled(unit="a", next_attempt=2, due_at=T0 + 31 * SECOND),
    ]
    assert sim.state.timers == {"retry:a": T0 + 31 * SECOND}
    assert sim.fire("retry:a", at=T0 + 31 * SECOND) == [
        TimerFired(key="retry:a"),
        dispatched("a", attempt=2, timeout_at=T0 + 61 * SECOND),
    ]
    # The first attempt's timer is gone: firing it again does nothing.
    assert sim.fire(f"timeout:{tok('a')}") == []
    assert sim.result(tok("a", 2), "ok") == [
        succeeded("a", "ok", attempt=2),
        WorkflowCompleted(output="ok"),
    ]


def test_schedule_and_heartbeat_timeouts_fail_the_attempt() -> None:
    sim = make(
        """
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            schedule_timeout: 5s
            heartbeat_timeout: 10s
            retry: {max_attempts: 3, initial_interval: 1s}
        """
    )
    sim.start()
    queued = orbit_err(
        OutcomeCode.SCHEDULE_TIMEOUT, "the attempt waited too long in the queue", True
    )
    assert sim.attempt_timeout(tok("a"), OutcomeCode.SCHEDULE_TIMEOUT) == [
        StepAttemptFailed(unit="a", attempt=1, error=queued),
        RetryScheduled(unit="a", next_attempt=2, due_at=T0 + SECOND),
    ]
    # The delivery is no longer in flight: a second report adds nothing.
    assert accept_attempt_timeout(sim.state, tok("a"), OutcomeCode.HEARTBEAT_TIMEOUT) == []
    sim.fire("retry:a", at=T0 + SECOND)
    silent = orbit_err(
        OutcomeCode.HEARTBEAT_TIMEOUT, "the attempt waited too long without a heartbeat", True
    )
    assert sim.attempt_timeout(tok("a", 2), OutcomeCode.HEARTBEAT_TIMEOUT) == [
        StepAttemptFailed(unit="a", attempt=2, error=silent),
        RetryScheduled(unit="a", next_attempt=3, due_at=T0 + 3 * SECOND),
    ]
    sim.fire("retry:a", at=T0 + 3 * SECOND)
    assert sim.attempt_timeout(tok("a", 3), OutcomeCode.HEARTBEAT_TIMEOUT) == [
        StepAttemptFailed(unit="a", attempt=3, error=silent),
        StepFailed(unit="a", error=silent),
        *fails_with("a", silent),
    ]


def test_the_workflow_timeout_times_the_execution_out() -> None:
    sim = make(
        """
        timeout: 1h
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
        """
    )
    sim.start()
    deadline = T0 + 60 * MINUTE
    assert sim.history == [
        created(),
        WorkflowStarted(deadline_at=deadline),
        scheduled("a"),
        dispatched("a"),
    ]
    assert sim.state.timers == {"workflow": deadline}
    assert sim.fire("workflow", at=deadline - 1) == []
    timeout = orbit_err(ErrorCode.TIMEOUT, "the workflow timeout passed")
    assert sim.fire("workflow", at=deadline) == [
        TimerFired(key="workflow"),
        CompensationStarted(cause="timed_out", error=timeout),
        StepCancelled(unit="a"),
        WorkflowTimedOut(compensation="none"),
    ]
    assert sim.state.status == "timed_out"


# -- uncertain attempts --


def test_a_lost_delivery_is_redelivered_with_the_same_attempt_and_a_new_token() -> None:
    sim = make(
        """
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            timeout: 1m
            retry: {max_attempts: 2, initial_interval: 1s}
        """
    )
    sim.start()
    keys = {sim.state.idempotency_key("a")}
    assert sim.lose(tok("a")) == [
        StepAttemptUncertain(unit="a", token=tok("a"), reason="worker lost"),
        dispatched("a", attempt=1, n=2, redelivery=True, timeout_at=T0 + MINUTE),
    ]
    keys.add(sim.state.idempotency_key("a"))
    sim.now = T0 + 5 * SECOND
    assert sim.lose(tok("a", 2)) == [
        StepAttemptUncertain(unit="a", token=tok("a", 2), reason="worker lost"),
        dispatched("a", attempt=1, n=3, redelivery=True, timeout_at=T0 + 5 * SECOND + MINUTE),
    ]
    keys.add(sim.state.idempotency_key("a"))
    # Losing an old delivery again adds nothing.
    assert accept_lost_delivery(sim.state, tok("a"), "again") == []
    # Not counted as a failure: attempt 1 failing still leaves attempt 2.
    flaky = err("FLAKY")
    assert sim.result(tok("a", 3), error=flaky) == [
        StepAttemptFailed(unit="a", attempt=1, error=flaky),
        RetryScheduled(unit="a", next_attempt=2, due_at=T0 + 6 * SECOND),
    ]
    sim.fire("retry:a", at=T0 + 6 * SECOND)
    assert sim.history[-1] == dispatched("a", attempt=2, n=4, timeout_at=T0 + 6 * SECOND + MINUTE)
    keys.add(sim.state.idempotency_key("a"))
    assert sim.result(tok("a", 4), "ok") == [
        succeeded("a", "ok", attempt=2),
        WorkflowCompleted(output="ok"),
    ]
    assert keys == {"e-1:a"}
    assert sim.state.unit("a").tokens == {
        tok("a", 1): 1,
        tok("a", 2): 1,
        tok("a", 3): 1,
        tok("a", 4): 2,
    }


def test_the_idempotency_key_is_execution_and_unit() -> None:
    sim = make(FAN_OUT)
    sim.start({"items": [1]}, execution_id="exec-9")
    assert sim.state.idempotency_key("ship[0]") == "exec-9:ship[0]"
    assert sim.state.idempotency_key("compensate:ship") == "exec-9:compensate:ship"
    assert sim.history[-1] == StepDispatched(unit="ship[0]", attempt=1, token="exec-9:ship[0]:1")


def test_a_worker_lost_with_max_attempts_one_still_succeeds() -> None:
    lost = {"a"}

    def worker(_value: Any, delivery: Any) -> Any:
        if delivery.unit in lost:
            lost.discard(delivery.unit)
            raise Crash
        return {"redelivery": delivery.redelivery, "attempt": delivery.attempt}

    sim = make(
        """
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            retry: {max_attempts: 1}
        """,
        {"t": worker},
    )
    sim.start()
    sim.run()
    assert sim.history[2:] == [
        scheduled("a"),
        dispatched("a"),
        StepAttemptUncertain(unit="a", token=tok("a"), reason="worker lost"),
        dispatched("a", attempt=1, n=2, redelivery=True),
        succeeded("a", {"redelivery": True, "attempt": 1}),
        WorkflowCompleted(output={"redelivery": True, "attempt": 1}),
    ]


# -- results --

TWO_STEPS = """
tasks:
  t:
    version: "1"
    output:
      type: object
      required: [id]
      properties:
        id: {type: string}
        state: {type: string, default: new}
steps:
  - id: a
    task: t
  - id: b
    task: t
    after: []
"""


def test_a_success_from_an_older_delivery_is_accepted_and_a_second_result_is_stale() -> None:
    sim = make(TWO_STEPS)
    sim.start()
    sim.lose(tok("a"))
    assert sim.state.unit("a").token == tok("a", 2)
    # The lost worker did the work after all.
    assert sim.result(tok("a"), {"id": "x"}) == [
        succeeded("a", {"id": "x", "state": "new"}),
    ]
    assert sim.result(tok("a", 2), {"id": "y"}) == [
        StaleResultIgnored(unit="a", token=tok("a", 2), reason="the unit is already resolved")
    ]
    assert sim.result(tok("a"), {"id": "z"}) == [
        StaleResultIgnored(unit="a", token=tok("a"), reason="the unit is already resolved")
    ]
    assert sim.result(tok("a", 2), error=err("LATE")) == [
        StaleResultIgnored(unit="a", token=tok("a", 2), reason="the unit is already resolved")
    ]
    assert sim.state.unit("a").output == {"id": "x", "state": "new"}
    # A token never issued (a forged one) is recorded as stale, and changes nothing.
    assert accept_result(sim.state, sim.definition, "e-1:a:9", {"id": "q"}) == [
        StaleResultIgnored(unit="a", token="e-1:a:9", reason="a token this execution never issued")
    ]
    assert accept_result(sim.state, sim.definition, "x" * 500, {"id": "q"}) == [
        StaleResultIgnored(unit="", token="x" * 200, reason="a token this execution never issued")
    ]


def test_a_failure_from_a_delivery_no_longer_in_flight_is_stale() -> None:
    sim = make(TWO_STEPS)
    sim.start()
    sim.lose(tok("a"))
    assert sim.result(tok("a"), error=err("BOOM")) == [
        StaleResultIgnored(
            unit="a", token=tok("a"), reason="a failure of a delivery that is no longer in flight"
        )
    ]
    assert sim.state.unit("a").status is UnitStatus.DISPATCHED
    assert sim.state.unit("a").token == tok("a", 2)


def test_an_output_breaking_the_output_schema_fails_the_attempt_for_good() -> None:
    sim = make(TWO_STEPS)
    sim.start()
    violation = TaskFailure(
        code="OUTPUT_CONTRACT_VIOLATION",
        message="the task output does not match its schema: $: 'id' is a required property",
        retryable=False,
    )
    assert sim.result(tok("a"), {"name": "x"}) == [
        StepAttemptFailed(unit="a", attempt=1, error=violation),
        StepFailed(unit="a", error=violation),
        CompensationStarted(cause="failed", error=step_error("a", violation)),
        StepCancelled(unit="b"),
        WorkflowFailed(error=step_error("a", violation), compensation="none"),
    ]


def test_the_output_schema_defaults_are_applied() -> None:
    sim = make(TWO_STEPS)
    sim.start()
    assert sim.result(tok("a"), {"id": "x"}) == [succeeded("a", {"id": "x", "state": "new"})]
    assert sim.result(tok("b"), {"id": "y", "state": "old"}) == [
        succeeded("b", {"id": "y", "state": "old"}),
        WorkflowCompleted(output={"id": "y", "state": "old"}),
    ]


WORKFLOW_CONTRACT = """
output_schema:
  type: object
  required: [total]
  properties:
    total: {type: integer}
    currency: {type: string, default: EUR}
tasks:
  t: {version: "1"}
  undo: {version: "1"}
steps:
  - id: a
    task: t
    compensate: {task: undo}
output:
  total: ${ steps.a.output }
"""


def test_an_output_breaking_the_workflows_output_schema_fails_it_and_compensates() -> None:
    sim = make(WORKFLOW_CONTRACT)
    sim.start()
    violation = orbit_err(
        ErrorCode.OUTPUT_CONTRACT_VIOLATION,
        "the workflow output does not match its schema: $.total: 'ten' is not of type 'integer'",
    )
    assert sim.result(tok("a"), "ten") == [
        succeeded("a", "ten"),
        CompensationStarted(cause="failed", error=violation),
        scheduled("compensate:a"),
        dispatched("compensate:a"),
    ]
    assert sim.result(tok("compensate:a"), None) == [
        succeeded("compensate:a"),
        WorkflowFailed(error=violation, compensation="completed"),
    ]


def test_the_workflows_output_schema_defaults_are_applied() -> None:
    sim = make(WORKFLOW_CONTRACT)
    sim.start()
    assert sim.result(tok("a"), 10) == [
        succeeded("a", 10),
        WorkflowCompleted(output={"total": 10, "currency": "EUR"}),
    ]


def test_a_tasks_error_details_survive_in_the_executions_cause_chain() -> None:
    sim = make(TWO_STEPS)
    sim.start()
    declined = TaskFailure(code="DECLINED", message="no", retryable=False, details={"foo": "bar"})
    sim.result(tok("a"), error=declined)
    error = sim.state.error
    assert error is not None
    assert error.details == {"step": "a", "code": "DECLINED"}
    assert error.cause == TaskFailure(
        code="DECLINED",
        message="no",
        retryable=False,
        details={"foo": "bar"},
        step="a",
        execution_id="e-1",
    )
    # Only an error that has a chain shows one: the stored form of the others is unchanged.
    assert "cause" not in declined.model_dump(mode="json")
    assert error.model_dump(mode="json")["cause"]["details"] == {"foo": "bar"}


INPUT_CONTRACT = """
tasks:
  t:
    version: "1"
    input:
      type: object
      required: [n]
      properties:
        n: {type: integer}
        mode: {type: string, default: fast}
steps:
  - id: a
    task: t
    input:
      n: ${ input.n }
"""


def test_an_input_breaking_the_input_schema_fails_the_step() -> None:
    sim = make(INPUT_CONTRACT)
    sim.start({"n": "oops"})
    violation = orbit_err(
        OutcomeCode.INPUT_CONTRACT_VIOLATION,
        "the input of t does not match its schema: $.n: 'oops' is not of type 'integer'",
    )
    assert sim.history[2:] == [StepFailed(unit="a", error=violation), *fails_with("a", violation)]


def test_the_input_schema_defaults_are_applied() -> None:
    sim = make(INPUT_CONTRACT)
    sim.start({"n": 3})
    assert sim.history[2:] == [scheduled("a", {"n": 3, "mode": "fast"}), dispatched("a")]


# -- continue_on_error -------------------------------------------------------------------------


def test_continue_on_error_gives_the_error_as_output_and_the_workflow_completes() -> None:
    sim = make(
        """
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            continue_on_error: true
            retry: {max_attempts: 1}
          - id: b
            task: t
            input:
              prev: ${ steps.a.output }
              status: ${ steps.a.status }
        """
    )
    sim.start()
    error = err("E", "it broke")
    assert sim.result(tok("a"), error=error) == [
        StepAttemptFailed(unit="a", attempt=1, error=error),
        StepFailed(unit="a", error=error),
        scheduled(
            "b",
            {
                "prev": {
                    "error": {
                        "code": "E",
                        "message": "it broke",
                        "retryable": True,
                        "details": None,
                    }
                },
                "status": "failed",
            },
        ),
        dispatched("b"),
    ]
    assert sim.result(tok("b"), "fine") == [
        succeeded("b", "fine"),
        WorkflowCompleted(output="fine"),
    ]


# -- failure, cancel and timeout: compensation and finally ---------------------------------------

SAGA = """
timeout: 1h
tasks:
  t: {version: "1"}
  undo: {version: "1"}
  tidy: {version: "1"}
steps:
  - id: reserve
    task: t
    compensate:
      task: undo
      input:
        what: reserve
        id: ${ steps.reserve.output.id }
  - id: charge
    task: t
    compensate:
      task: undo
      input: {what: charge}
  - id: ship
    task: t
    retry: {max_attempts: 1}
  - id: audit
    task: t
    after: []
finally:
  - id: unlock
    task: tidy
    input:
      charged: ${ steps.charge.status }
"""


def _saga_until_ship() -> Simulator:
    sim = make(SAGA)
    sim.start()
    assert sim.history[2:] == [
        scheduled("reserve"),
        scheduled("audit"),
        dispatched("reserve"),
        dispatched("audit"),
    ]
    assert sim.result(tok("reserve"), {"id": "r-1"}) == [
        succeeded("reserve", {"id": "r-1"}),
        scheduled("charge"),
        dispatched("charge"),
    ]
    assert sim.result(tok("charge"), {"paid": 5}) == [
        succeeded("charge", {"paid": 5}),
        scheduled("ship"),
        dispatched("ship"),
    ]
    return sim


def test_a_failure_compensates_succeeded_steps_newest_first_then_runs_finally() -> None:
    sim = _saga_until_ship()
    error = err("NO_COURIER", "nobody", retryable=False)
    failure = step_error("ship", error)
    assert sim.result(tok("ship"), error=error) == [
        StepAttemptFailed(unit="ship", attempt=1, error=error),
        StepFailed(unit="ship", error=error),
        CompensationStarted(cause="failed", error=failure),
        StepCancelled(unit="audit"),
        scheduled("compensate:charge", {"what": "charge"}),
        dispatched("compensate:charge"),
    ]
    # A late result of the cancelled step is stale.
    assert sim.result(tok("audit"), "late") == [
        StaleResultIgnored(unit="audit", token=tok("audit"), reason="the unit is already resolved")
    ]
    assert sim.result(tok("compensate:charge"), "refunded") == [
        succeeded("compensate:charge", "refunded"),
        scheduled("compensate:reserve", {"what": "reserve", "id": "r-1"}),
        dispatched("compensate:reserve"),
    ]
    assert sim.result(tok("compensate:reserve"), "released") == [
        succeeded("compensate:reserve", "released"),
        scheduled("finally:unlock", {"charged": "succeeded"}),
        dispatched("finally:unlock"),
    ]
    assert sim.result(tok("finally:unlock"), "unlocked") == [
        succeeded("finally:unlock", "unlocked"),
        WorkflowFailed(error=failure, compensation="completed"),
    ]
    assert sim.state.status == "failed"
    assert sim.state.compensation == "completed"


def test_a_cancel_compensates_then_runs_finally() -> None:
    sim = _saga_until_ship()
    mark = len(sim.history)
    sim.cancel("customer asked")
    assert since(sim, mark) == [
        CancelRequested(reason="customer asked"),
        CompensationStarted(cause="cancelled"),
        StepCancelled(unit="audit"),
        StepCancelled(unit="ship"),
        scheduled("compensate:charge", {"what": "charge"}),
        dispatched("compensate:charge"),
    ]
    # A second cancel adds nothing.
    assert accept_cancel(sim.state, "again") == []
    sim.result(tok("compensate:charge"), "refunded")
    assert sim.result(tok("compensate:reserve"), "released")[-2:] == [
        scheduled("finally:unlock", {"charged": "succeeded"}),
        dispatched("finally:unlock"),
    ]
    assert sim.result(tok("finally:unlock"), "unlocked") == [
        succeeded("finally:unlock", "unlocked"),
        WorkflowCancelled(reason="customer asked", compensation="completed"),
    ]


def test_a_workflow_timeout_compensates_then_runs_finally() -> None:
    sim = _saga_until_ship()
    timeout = orbit_err(ErrorCode.TIMEOUT, "the workflow timeout passed")
    assert sim.fire("workflow", at=T0 + 60 * MINUTE) == [
        TimerFired(key="workflow"),
        CompensationStarted(cause="timed_out", error=timeout),
        StepCancelled(unit="audit"),
        StepCancelled(unit="ship"),
        scheduled("compensate:charge", {"what": "charge"}),
        dispatched("compensate:charge"),
    ]
    assert sim.state.timers == {}
    sim.result(tok("compensate:charge"), "refunded")
    sim.result(tok("compensate:reserve"), "released")
    assert sim.result(tok("finally:unlock"), "unlocked") == [
        succeeded("finally:unlock", "unlocked"),
        WorkflowTimedOut(compensation="completed"),
    ]


def test_a_cancel_with_nothing_to_compensate_ends_at_once() -> None:
    sim = make(
        """
        tasks:
          t: {version: "1"}
          tidy: {version: "1"}
        steps:
          - id: a
            task: t
        finally:
          - id: unlock
            task: tidy
        """
    )
    sim.start()
    mark = len(sim.history)
    sim.cancel()
    assert since(sim, mark) == [
        CancelRequested(reason=""),
        CompensationStarted(cause="cancelled"),
        StepCancelled(unit="a"),
        scheduled("finally:unlock"),
        dispatched("finally:unlock"),
    ]
    assert sim.result(tok("finally:unlock"), None) == [
        succeeded("finally:unlock", None),
        WorkflowCancelled(reason="", compensation="none"),
    ]


def test_a_failed_compensation_gives_failed_and_the_others_still_run() -> None:
    sim = make(
        """
        tasks:
          t: {version: "1"}
          undo: {version: "1"}
        steps:
          - id: a
            task: t
            compensate: {task: undo, input: {undo: a}}
          - id: b
            task: t
            compensate:
              task: undo
              input: {undo: b}
              retry: {max_attempts: 2, initial_interval: 2s}
          - id: c
            task: t
            compensate: {task: undo, input: {undo: c}}
          - id: d
            task: t
            retry: {max_attempts: 1}
        """
    )
    sim.start()
    for step in ("a", "b", "c"):
        sim.result(tok(step), step.upper())
    error = err("BROKEN", "d broke")
    failure = step_error("d", error)
    assert sim.result(tok("d"), error=error) == [
        StepAttemptFailed(unit="d", attempt=1, error=error),
        StepFailed(unit="d", error=error),
        CompensationStarted(cause="failed", error=failure),
        scheduled("compensate:c", {"undo": "c"}),
        dispatched("compensate:c"),
    ]
    assert sim.result(tok("compensate:c"), "undone") == [
        succeeded("compensate:c", "undone"),
        scheduled("compensate:b", {"undo": "b"}),
        dispatched("compensate:b"),
    ]
    stuck = err("STUCK", "cannot undo")
    assert sim.result(tok("compensate:b"), error=stuck) == [
        StepAttemptFailed(unit="compensate:b", attempt=1, error=stuck),
        RetryScheduled(unit="compensate:b", next_attempt=2, due_at=T0 + 2 * SECOND),
    ]
    assert sim.fire("retry:compensate:b", at=T0 + 2 * SECOND) == [
        TimerFired(key="retry:compensate:b"),
        dispatched("compensate:b", attempt=2),
    ]
    assert sim.result(tok("compensate:b", 2), error=stuck) == [
        StepAttemptFailed(unit="compensate:b", attempt=2, error=stuck),
        StepFailed(unit="compensate:b", error=stuck),
        scheduled("compensate:a", {"undo": "a"}),
        dispatched("compensate:a"),
    ]
    assert sim.result(tok("compensate:a"), "undone") == [
        succeeded("compensate:a", "undone"),
        WorkflowFailed(error=failure, compensation="failed"),
    ]


def test_compensations_run_newest_first_by_completion_not_by_definition_order() -> None:
    sim = make(
        """
        tasks:
          t: {version: "1"}
          undo: {version: "1"}
        steps:
          - id: x
            task: t
            after: []
            compensate: {task: undo, input: {undo: x}}
          - id: y
            task: t
            after: []
            compensate: {task: undo, input: {undo: y}}
          - id: z
            task: t
            after: [x, y]
        """
    )
    sim.start()
    sim.result(tok("y"), "Y")
    sim.result(tok("x"), "X")
    fatal = err("F", retryable=False)
    assert sim.result(tok("z"), error=fatal)[-2:] == [
        scheduled("compensate:x", {"undo": "x"}),
        dispatched("compensate:x"),
    ]
    assert sim.result(tok("compensate:x"), None)[-2:] == [
        scheduled("compensate:y", {"undo": "y"}),
        dispatched("compensate:y"),
    ]
    assert sim.result(tok("compensate:y"), None)[-1] == WorkflowFailed(
        error=step_error("z", fatal), compensation="completed"
    )


# -- the history limit --


def test_the_history_limit_fails_the_execution_and_compensation_still_runs() -> None:
    sim = make(
        """
        tasks:
          t: {version: "1"}
          undo: {version: "1"}
        steps:
          - id: a
            task: t
            compensate: {task: undo}
          - id: b
            task: t
          - id: c
            task: t
        """,
        limits=Limits(max_history_events=6),
    )
    sim.start()
    assert len(sim.history) == 4
    limit = "the execution reached 6 history events"
    error = orbit_err(OutcomeCode.LIMIT_EXCEEDED, limit)
    # The result itself is event 5; scheduling b is event 6; dispatching it would be 7.
    assert sim.result(tok("a"), "A") == [
        succeeded("a", "A"),
        scheduled("b"),
        LimitExceeded(limit="max_history_events", message=limit),
        CompensationStarted(cause="failed", error=error),
        StepCancelled(unit="b"),
        scheduled("compensate:a"),
        dispatched("compensate:a"),
    ]
    assert sim.result(tok("compensate:a"), None) == [
        succeeded("compensate:a", None),
        WorkflowFailed(error=error, compensation="completed"),
    ]


# -- queries --


def test_queries_read_the_state() -> None:
    sim = make(
        """
        tasks:
          t: {version: "1"}
        queries:
          charged: ${ steps.a.output != null }
          output: ${ steps.a.output }
          status: ${ steps.a.status }
          amount: ${ steps.a.output.amount }
        steps:
          - id: a
            task: t
        """
    )
    sim.start()
    assert evaluate_query(sim.state, sim.definition, "charged") is False
    assert evaluate_query(sim.state, sim.definition, "output") is None
    assert evaluate_query(sim.state, sim.definition, "status") == "dispatched"
    with pytest.raises(OrbitError) as failed:
        evaluate_query(sim.state, sim.definition, "amount")
    assert failed.value.code is ErrorCode.QUERY_FAILED
    assert failed.value.message.startswith("query 'amount': ")
    with pytest.raises(OrbitError) as unknown:
        evaluate_query(sim.state, sim.definition, "nope")
    assert unknown.value.code is ErrorCode.UNKNOWN_QUERY
    assert (
        unknown.value.message == "w has no query 'nope' (it has: amount, charged, output, status)"
    )
    sim.result(tok("a"), {"amount": 42})
    assert evaluate_query(sim.state, sim.definition, "charged") is True
    assert evaluate_query(sim.state, sim.definition, "amount") == 42
    assert evaluate_query(sim.state, sim.definition, "status") == "succeeded"


def test_a_query_reads_what_the_next_turn_makes_of_a_stored_signal() -> None:
    sim = make(
        """
        signals: {go: {}}
        queries:
          taken: ${ steps.wait.output }
        steps:
          - id: wait
            await: go
          - id: again
            await: go
        """
    )
    sim.start()
    # Recorded by the gateway and acknowledged; the decider has not taken it yet.
    stored = evolve(sim.state, accept_signal(sim.state, sim.definition, "go", "now")[0])
    assert evaluate_query(stored, sim.definition, "taken") is None
    seen = projected(stored, sim.definition, T0, Policy())
    assert evaluate_query(seen, sim.definition, "taken") == "now"
    # The projection is what the decider then writes, and it is not stored.
    assert seen.last_seq > stored.last_seq
    sim.append(accept_signal(sim.state, sim.definition, "go", "now"))
    sim.settle()
    assert evaluate_query(sim.state, sim.definition, "taken") == "now"
    assert projected(sim.state, sim.definition, T0, Policy()) == sim.state


# -- inputs --

SIGNALLED = """
input:
  type: object
  required: [order]
  properties:
    order: {type: string}
    currency: {type: string, default: EUR}
signals:
  approval:
    type: object
    required: [approved]
    properties:
      approved: {type: boolean}
      by: {type: string, default: nobody}
steps:
  - id: w
    await: approval
"""


def test_accept_signal_checks_the_name_the_payload_and_the_status() -> None:
    sim = make(SIGNALLED)
    sim.start({"order": "o-1"})
    with pytest.raises(OrbitError) as unknown:
        accept_signal(sim.state, sim.definition, "aproval", {})
    assert unknown.value.code is ErrorCode.UNKNOWN_SIGNAL
    assert unknown.value.message == "w has no signal 'aproval' (it has: approval)"
    with pytest.raises(OrbitError) as invalid:
        accept_signal(sim.state, sim.definition, "approval", {"approved": "yes"})
    assert invalid.value.code is ErrorCode.SIGNAL_PAYLOAD_INVALID
    assert "$.approved" in invalid.value.message
    assert accept_signal(sim.state, sim.definition, "approval", {"approved": True}) == [
        SignalReceived(name="approval", payload={"approved": True, "by": "nobody"})
    ]
    sim.signal("approval", {"approved": True})
    assert sim.state.status == "completed"
    with pytest.raises(OrbitError) as finished:
        accept_signal(sim.state, sim.definition, "approval", {"approved": True})
    assert finished.value.code is ErrorCode.EXECUTION_FINISHED
    assert finished.value.message == "execution e-1 is completed"
    with pytest.raises(OrbitError) as cancel_finished:
        accept_cancel(sim.state)
    assert cancel_finished.value.code is ErrorCode.EXECUTION_FINISHED


def test_accept_cancel_twice_adds_nothing() -> None:
    sim = make(SIGNALLED)
    sim.start({"order": "o-1"})
    first = accept_cancel(sim.state, "one")
    assert first == [CancelRequested(reason="one")]
    sim.append(first)
    assert accept_cancel(sim.state, "two") == []
    sim.settle()
    assert sim.state.status == "cancelled"
    assert sim.history[-1] == WorkflowCancelled(reason="one", compensation="none")


def test_start_execution_checks_the_input_and_applies_defaults() -> None:
    ir = compile_definition(HEAD + SIGNALLED).ir
    with pytest.raises(OrbitError) as invalid:
        start_execution(ir, "sha256:x", "e-1", {"order": 5})
    assert invalid.value.code is ErrorCode.INVALID_INPUT
    assert "$.order" in invalid.value.message
    with pytest.raises(OrbitError) as missing:
        start_execution(ir, "sha256:x", "e-1")
    assert missing.value.code is ErrorCode.INVALID_INPUT
    assert start_execution(ir, "sha256:x", "e-1", {"order": "o-1"}) == WorkflowCreated(
        execution_id="e-1",
        workflow="w",
        version="1.0.0",
        definition_hash="sha256:x",
        input={"order": "o-1", "currency": "EUR"},
    )
    defaults_only = compile_definition(
        HEAD
        + "input:\n  type: object\n  properties: {n: {type: integer, default: 1}}\n"
        + "steps:\n  - {id: s, sleep: 1s}\n"
    ).ir
    assert start_execution(defaults_only, "sha256:x", "e-2").input == {"n": 1}


# -- determinism, idempotence and JSON --


def _rich_history() -> Simulator:
    flaky = {"reserve": 1}

    def work(_value: Any, delivery: Any) -> Any:
        if flaky.get(delivery.unit, 0) > 0:
            flaky[delivery.unit] -= 1
            raise Fail("FLAKY")
        if delivery.unit == "ship":
            raise Fail("NO_COURIER", retryable=False)
        if delivery.unit == "audit":
            raise Hang
        return {"id": delivery.unit}

    sim = make(SAGA, {"t": work, "undo": lambda _v, _d: "undone", "tidy": lambda _v, _d: None})
    sim.start()
    sim.run()
    assert sim.state.status == "failed"
    return sim


def test_decide_is_deterministic_and_idempotent_on_every_prefix() -> None:
    sim = _rich_history()
    definition = sim.definition
    state = ExecutionState()
    for event in sim.history:
        state = evolve(state, event)
        for now in (T0, T0 + 10 * MINUTE):
            first = decide(state, definition, now)
            assert decide(state, definition, now) == first
            settled, produced = decide_until_stable(state, definition, now)
            assert decide_until_stable(state, definition, now) == (settled, produced)
            # After applying what it decided, there is nothing more to decide.
            assert decide(settled, definition, now) == []
            assert decide_until_stable(settled, definition, now) == (settled, [])
            assert replay([*sim.history[: state.last_seq], *produced]) == settled
    assert state == sim.state


def test_two_runs_of_the_same_scenario_write_the_same_history() -> None:
    assert _rich_history().history == _rich_history().history


def test_events_round_trip_through_json() -> None:
    sim = _rich_history()
    kinds = {event.type for event in sim.history}
    assert {"RetryScheduled", "StepCancelled", "CompensationStarted", "WorkflowFailed"} <= kinds
    for event in sim.history:
        assert event_from_json(event_to_json(event)) == event
    text = "[" + ",".join(event_to_json(event) for event in sim.history) + "]"
    assert events_from_json(text) == sim.history
    assert replay(events_from_json(text)) == sim.state
