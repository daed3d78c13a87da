"""An execution whose stored history no longer decodes: why, how it is folded, how it ends.

The decoding problem is told in a line without the payload; the fold stops at
the bad event and says whether the history already holds the execution's end;
the end (orbit_model.unreadable) fails the execution with
``HISTORY_UNREADABLE``, cancels its children and answers its parent.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from orbit_model.children import child_execution_id
from orbit_model.errors import ErrorCode
from orbit_model.events import (
    Event,
    StepScheduled,
    TaskFailure,
    WorkflowFailed,
    event_from_json,
    event_to_json,
)
from orbit_model.inputs import start_execution
from orbit_model.messages import CancelChild, TaskResult
from orbit_model.outcome_codes import OutcomeCode
from orbit_model.state import ExecutionState, replay
from orbit_model.unreadable import (
    MAX_PROBLEM_CHARS,
    decode_problem,
    fail_unreadable,
    unreadable_failure,
)
from orbit_services.store.history import (
    RAW_SHOWN_CHARS,
    HistoryUnreadable,
    UndecodedEvent,
    decoded,
    fold,
)

from .simulator import TOPOLOGY
from .test_plan import CHILD, PARENT, Family

AT = datetime(2026, 1, 1, tzinfo=UTC)
DEEP = '{"type": "SignalReceived", "name": "go", "payload": ' + "[" * 1000 + "]" * 1000 + "}"


def _problem(data: str) -> str:
    with pytest.raises(ValidationError) as raised:
        event_from_json(data)
    return decode_problem(raised.value)


def test_a_payload_nested_too_deep_is_told_in_a_line_without_the_payload() -> None:
    problem = _problem(DEEP)
    assert "recursion limit" in problem
    assert "[[" not in problem
    assert "\n" not in problem
    assert len(problem) <= MAX_PROBLEM_CHARS


def test_an_unknown_kind_and_a_field_of_the_wrong_type_are_named() -> None:
    unknown = _problem('{"type": "StepTeleported", "unit": "greet"}')
    assert "StepTeleported" in unknown
    assert len(unknown) <= MAX_PROBLEM_CHARS
    wrong = _problem('{"type": "StepSucceeded", "unit": "greet", "attempt": "first"}')
    assert wrong.startswith("StepSucceeded.attempt: ")
    assert "first" not in wrong  # the input is never quoted


def test_the_failure_names_the_event_and_is_not_retryable() -> None:
    failure = unreadable_failure(7, "StepTeleported", "event: no such tag")
    assert failure.code == ErrorCode.HISTORY_UNREADABLE
    assert failure.message == (
        "event 7 (StepTeleported) of its history cannot be decoded: event: no such tag"
    )
    assert failure.retryable is False


def _created() -> Event:
    return start_execution(CHILD.ir, CHILD.hash, "e-1", None)


def _stored(seq: int, data: str, stored_type: str = "SignalReceived") -> Event | UndecodedEvent:
    return decoded(seq, AT, stored_type, data)


def test_the_fold_stops_at_the_first_event_that_does_not_decode() -> None:
    created = _created()
    scheduled = StepScheduled(unit="work")
    events = [
        _stored(1, event_to_json(created)),
        _stored(2, DEEP),
        _stored(3, event_to_json(scheduled)),
    ]
    assert isinstance(events[1], UndecodedEvent)
    with pytest.raises(HistoryUnreadable) as raised:
        fold("e-1", ExecutionState(), events)
    error = raised.value
    assert error.code == ErrorCode.HISTORY_UNREADABLE
    assert error.before == replay([created])
    assert (error.event.seq, error.last_seq, error.ended) == (2, 3, False)
    assert "event 2 (SignalReceived)" in error.message


def test_a_history_holding_its_end_after_the_bad_event_has_ended() -> None:
    failed = WorkflowFailed(error=unreadable_failure(2, "SignalReceived", "too deep"))
    events = [_stored(2, DEEP), _stored(3, event_to_json(failed), "WorkflowFailed")]
    with pytest.raises(HistoryUnreadable) as raised:
        fold("e-1", replay([_created()]), events)
    assert (raised.value.last_seq, raised.value.ended) == (3, True)


def test_an_undecoded_event_shows_its_raw_json_cut_short() -> None:
    huge = '{"type": "SignalReceived", "name": "' + "x" * 10_000 + '", "extra": 1}'
    event = _stored(5, huge)
    assert isinstance(event, UndecodedEvent)
    entry = event.to_json_data()
    assert (entry["seq"], entry["type"], entry["data"]) == (5, "SignalReceived", {})
    assert len(entry["raw"]) == RAW_SHOWN_CHARS
    assert entry["raw"].endswith("…")
    assert entry["error"]["code"] == ErrorCode.HISTORY_UNREADABLE
    assert "SignalReceived.extra" in entry["error"]["message"]


def _failure() -> TaskFailure:
    return unreadable_failure(9, "StepTeleported", "event: no such tag")


def test_a_child_that_cannot_be_read_fails_its_parents_step() -> None:
    family = Family(PARENT, CHILD)
    child_id = child_execution_id("p-1", "kid")
    end = fail_unreadable(family.states[child_id], child_id, _failure(), CHILD.ir, TOPOLOGY)
    assert end.state.status == "failed"
    assert end.state.error == _failure()
    [answer] = [outgoing.message for outgoing in end.messages]
    assert isinstance(answer, TaskResult)
    assert answer.error is not None
    assert answer.error.code == OutcomeCode.CHILD_FAILED
    family.deliver("p-1", answer)
    # Not retried: a child that cannot be read says trying again cannot help.
    assert answer.error.retryable is False
    assert family.states["p-1"].status == "failed"


def test_a_parent_that_cannot_be_read_cancels_its_running_child() -> None:
    family = Family(PARENT, CHILD)
    end = fail_unreadable(family.states["p-1"], "p-1", _failure(), PARENT.ir, TOPOLOGY)
    [cancel] = [outgoing.message for outgoing in end.messages]
    assert isinstance(cancel, CancelChild)
    assert cancel.execution_id == child_execution_id("p-1", "kid")
    # Without its definition it cannot tell a child step from a task: nothing is cancelled.
    assert fail_unreadable(family.states["p-1"], "p-1", _failure(), None, TOPOLOGY).messages == []


def test_an_execution_whose_first_event_cannot_be_read_still_ends() -> None:
    end = fail_unreadable(ExecutionState(), "e-9", _failure(), None, TOPOLOGY)
    assert (end.state.execution_id, end.state.status, end.messages) == ("e-9", "failed", [])
    assert end.event.error.code == ErrorCode.HISTORY_UNREADABLE
