"""Parked messages (orbit_model.parked): who is told of one, and what the execution records.

A poison task (its message parked after the delivery limit) fails its
attempt with ``DELIVERY_LIMIT_EXCEEDED``, so the step's retry policy goes
on; a parked result of the delivery in flight fails it with
``MESSAGE_PARKED``; a parked signal, timer firing or cancel is recorded as
lost and shown in the view. Nothing else changes anything, and nothing at
all unless its sender could have sent the original there.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbit_model.broker_roles import Role
from orbit_model.events import MessageLost, RetryScheduled, StepAttemptFailed, StepFailed
from orbit_model.messages import MessageParked, TaskResult, Wake
from orbit_model.outcome_codes import OutcomeCode
from orbit_model.parked import Death, accept_parked, death_of, may_report, notice_for, speaker
from orbit_model.state import UnitStatus
from orbit_model.topology import DELIVERY_LIMIT, Topology
from orbit_model.views import lost_messages_view, view_json

from .test_scenarios import make, tok

RETRIED = """
tasks: {poison: {version: "1"}}
steps:
  - id: a
    task: poison
    retry: {max_attempts: 2, initial_interval: 1s}
"""

LIMIT = Death(queue="ns.task.poison@1", reason="delivery_limit")
TASKS = Death(queue="ns.task.poison@1", reason="rejected")


def parked(token: str | None, reason: str = "delivery_limit", **fields: Any) -> MessageParked:
    return MessageParked(
        execution_id="e-1",
        message_type=fields.pop("message_type", "TaskAssignment"),
        token=token,
        queue=fields.pop("queue", "ns.task.poison@1"),
        reason=reason,
        delivery_count=fields.pop("delivery_count", DELIVERY_LIMIT + 1),
        **fields,
    )


def test_a_poison_task_fails_its_attempt_and_the_retry_policy_goes_on() -> None:
    sim = make(RETRIED)
    sim.start()
    events = sim.turn([parked(tok("a"), worker_id="w-1")])
    failed, retry = events[0], events[1]
    assert isinstance(failed, StepAttemptFailed)
    assert failed.error.code == OutcomeCode.DELIVERY_LIMIT_EXCEEDED
    assert failed.error.retryable
    assert failed.worker_id == "w-1"
    assert failed.error.details is not None
    assert failed.error.details["delivery_count"] == DELIVERY_LIMIT + 1
    assert failed.error.details["worker_id"] == "w-1"
    assert "w-1" in failed.error.message
    assert str(DELIVERY_LIMIT + 1) in failed.error.message
    assert isinstance(retry, RetryScheduled)
    # The retry is a new delivery; once it is parked too, the step fails.
    sim.now = retry.due_at
    sim.fire("retry:a")
    assert sim.unit_status("a") is UnitStatus.DISPATCHED
    last = sim.turn([parked(tok("a", 2))])
    assert any(isinstance(e, StepFailed) for e in last)
    assert sim.state.status == "failed"
    assert sim.state.error is not None
    assert sim.state.error.code == OutcomeCode.DELIVERY_LIMIT_EXCEEDED


def test_a_parked_result_of_the_delivery_in_flight_fails_it() -> None:
    sim = make(RETRIED)
    sim.start()
    notice = parked(tok("a"), reason="rejected", message_type="TaskResult", delivery_count=None)
    (failed, *_) = sim.turn([notice])
    assert isinstance(failed, StepAttemptFailed)
    assert failed.error.code == OutcomeCode.MESSAGE_PARKED
    assert "TaskResult" in failed.error.message


def test_a_parked_message_about_an_old_delivery_changes_nothing() -> None:
    sim = make(RETRIED)
    sim.start()
    sim.result(tok("a"), error=None, output={"done": True})
    assert sim.state.status == "completed"
    assert accept_parked(sim.state, parked(tok("a"))) == []
    assert accept_parked(sim.state, parked("e-1:nothing:1")) == []


def test_a_parked_signal_is_recorded_as_lost_and_shown() -> None:
    sim = make(
        """
        signals: {go: {}}
        steps:
          - id: wait
            await: go
        """
    )
    sim.start()
    notice = parked(
        None,
        reason="rejected",
        message_type="SignalExecution",
        queue="ns.commands",
        delivery_count=None,
        detail="signal go",
    )
    (lost,) = sim.turn([notice])
    assert lost == MessageLost(
        message_type="SignalExecution", queue="ns.commands", reason="rejected", detail="signal go"
    )
    assert [view_json(lost) for lost in lost_messages_view(sim.state)] == [
        {
            "message_type": "SignalExecution",
            "queue": "ns.commands",
            "reason": "rejected",
            "detail": "signal go",
        }
    ]


def test_an_ended_or_unknown_execution_records_nothing() -> None:
    sim = make(RETRIED)
    assert accept_parked(sim.state, parked(None)) == []  # does not exist yet
    sim.start()
    sim.cancel("stop")
    sim.run()
    assert sim.state.terminal
    assert accept_parked(sim.state, parked(None)) == []


# -- reading the parked message --


def test_death_of_reads_the_newest_x_death_entry() -> None:
    headers = {
        "x-death": [
            {"queue": b"ns.task.t@1", "reason": b"delivery_limit", "count": 1},
            {"queue": "older", "reason": "rejected"},
        ]
    }
    assert death_of(headers) == Death(queue="ns.task.t@1", reason="delivery_limit")
    assert death_of(None) is None
    assert death_of({}) is None
    assert death_of({"x-death": "nonsense"}) is None
    assert death_of({"x-death": [1]}) is None


def _body(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


def test_an_assignment_without_a_type_is_known_by_its_task_queue() -> None:
    body = _body(execution_id="e-1", token="e-1:a:1", task="poison")
    notice = notice_for(body, LIMIT, task_queue=True)
    assert notice is not None
    assert notice.message_type == "TaskAssignment"
    assert notice.token == "e-1:a:1"
    assert notice.delivery_count == DELIVERY_LIMIT + 1
    assert notice_for(body, LIMIT, task_queue=False) is None


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"type": "TaskResult", "execution_id": "e-1", "token": "t", "worker_id": "w"},
            ("e-1", "t", "w", ""),
        ),
        (
            {"type": "StartChild", "execution_id": "kid", "parent_execution_id": "p"}
            | {"parent_token": "p:kid:1"},
            ("p", "p:kid:1", None, ""),
        ),
        (
            {"type": "SignalExecution", "execution_id": "e-1", "name": "go"},
            ("e-1", None, None, "signal go"),
        ),
        (
            {"type": "TimerDue", "execution_id": "e-1", "key": "sleep:a"},
            ("e-1", None, None, "timer sleep:a"),
        ),
    ],
)
def test_who_is_told_of_each_kind(fields: dict[str, Any], expected: tuple[Any, ...]) -> None:
    notice = notice_for(_body(**fields), Death("q", "rejected"), task_queue=False)
    assert notice is not None
    assert (notice.execution_id, notice.token, notice.worker_id, notice.detail) == expected
    assert notice.delivery_count is None


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"\xff\xfe",
        b"[1, 2]",
        _body(type="StartExecution", execution_id="e-1", workflow="w"),
        _body(type="MessageParked", execution_id="e-1", message_type="TaskResult"),
        _body(type="TaskResult", token="t"),  # no execution
        _body(execution_id="e-1"),  # no type, not from a task queue
    ],
)
def test_nobody_is_told_of_what_no_execution_waits_on(body: bytes) -> None:
    assert notice_for(body, Death("q", "rejected"), task_queue=False) is None


@given(st.binary(max_size=200), st.booleans())
def test_any_parked_body_is_read_without_raising(body: bytes, task_queue: bool) -> None:
    notice = notice_for(body, LIMIT, task_queue=task_queue)
    assert notice is None or notice.execution_id


@given(
    st.dictionaries(
        st.sampled_from(["type", "execution_id", "token", "name", "key", "worker_id"]),
        st.one_of(st.none(), st.integers(), st.text(max_size=10), st.lists(st.integers())),
    )
)
def test_any_json_object_is_read_without_raising(fields: dict[str, Any]) -> None:
    notice = notice_for(json.dumps(fields).encode(), LIMIT, task_queue=True)
    assert notice is None or isinstance(notice.execution_id, str)


# -- who could have sent it --

NS_TOPOLOGY = Topology("ns", 4)
COMMANDS = Death(queue="ns.commands", reason="rejected")
DECIDER = Death(queue="ns.decider.3", reason="rejected")
CONTROL = Death(queue="ns.control", reason="rejected")


@pytest.mark.parametrize(
    ("death", "message_type", "sender", "reported"),
    [
        # The probe: a client may send commands only, so its result or timer parked in
        # NS.commands is nothing an execution waits on.
        (COMMANDS, "TaskResult", Role.CLIENT, False),
        (COMMANDS, "TimerDue", Role.CLIENT, False),
        (COMMANDS, "Wake", Role.CLIENT, False),
        (COMMANDS, "SignalExecution", Role.CLIENT, True),  # it may signal: lost, told
        (COMMANDS, "CancelExecution", Role.GATEWAY, True),
        (COMMANDS, "SignalExecution", None, False),  # no Orbit user
        (DECIDER, "TaskResult", Role.WORKER, True),  # then held to its task (test_plan)
        (DECIDER, "TaskResult", Role.HTTP_ADAPTER, True),
        (DECIDER, "TaskResult", Role.DECIDER, True),
        (DECIDER, "TaskResult", Role.CLIENT, False),
        (DECIDER, "TimerDue", Role.TIMER, True),
        (DECIDER, "TimerDue", Role.WORKER, False),
        (DECIDER, "DeliveryLost", Role.DISPATCHER, True),
        (DECIDER, "DeliveryLost", Role.WORKER, False),
        (DECIDER, "StartChild", Role.DECIDER, True),
        (DECIDER, "SignalExecution", Role.CLIENT, False),  # the decider takes no signal
        (LIMIT, "TaskAssignment", Role.DECIDER, True),
        (TASKS, "TaskAssignment", Role.GATEWAY, True),
        (TASKS, "TaskAssignment", Role.WORKER, False),
        (TASKS, "TaskResult", Role.DECIDER, False),
        (CONTROL, "RegisterWorker", Role.WORKER, True),
        (Death(queue="ns.elsewhere", reason="rejected"), "TaskResult", Role.WORKER, False),
        (Death(queue="other.commands", reason="rejected"), "SignalExecution", Role.CLIENT, False),
    ],
)
def test_a_parked_message_is_reported_only_if_its_sender_could_have_sent_it_there(
    death: Death, message_type: str, sender: Role | None, reported: bool
) -> None:
    assert may_report(NS_TOPOLOGY, death, message_type, sender) is reported


def test_a_report_of_a_parked_result_speaks_for_the_result_s_sender() -> None:
    result = parked("t", message_type="TaskResult", sender="ns.worker.w")
    assert speaker(result, "ns.dispatcher") == "ns.worker.w"
    assert speaker(parked("t", sender="ns.decider"), "ns.dispatcher") is None
    assert speaker(TaskResult(execution_id="e-1", token="t"), "ns.worker.w") == "ns.worker.w"
    assert speaker(Wake(execution_id="e-1"), "ns.gateway") is None
