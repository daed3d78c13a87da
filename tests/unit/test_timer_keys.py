"""Timer keys: read and written in one place, in the form stored histories hold."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbit_model.timer_keys import WORKFLOW_TIMER, MalformedTimerKey, TimerKey, TimerKind

_SUBJECT_KINDS = [kind for kind in TimerKind if kind is not TimerKind.WORKFLOW]
keys = st.one_of(
    st.just(TimerKey.workflow()),
    st.builds(TimerKey, st.sampled_from(_SUBJECT_KINDS), st.text(min_size=1)),
)


@given(keys)
def test_a_key_reads_back_as_itself(key: TimerKey) -> None:
    assert TimerKey.parse(str(key)) == key


@given(st.text())
def test_text_that_reads_as_a_key_is_written_back_byte_for_byte(text: str) -> None:
    try:
        key = TimerKey.parse(text)
    except MalformedTimerKey:
        return
    assert str(key) == text


@pytest.mark.parametrize(
    ("text", "kind", "subject"),
    [
        ("workflow", TimerKind.WORKFLOW, ""),
        ("retry:ship[3]", TimerKind.RETRY, "ship[3]"),
        ("timer:wait.a.bit", TimerKind.TIMER, "wait.a.bit"),
        ("timeout:order-7:charge:2.mac", TimerKind.TIMEOUT, "order-7:charge:2.mac"),
        ("schedule:e:u:1.m", TimerKind.SCHEDULE, "e:u:1.m"),
        ("heartbeat:e:u:1.m", TimerKind.HEARTBEAT, "e:u:1.m"),
    ],
)
def test_the_stored_forms(text: str, kind: TimerKind, subject: str) -> None:
    assert TimerKey.parse(text) == TimerKey(kind, subject)
    assert str(TimerKey(kind, subject)) == text


def test_the_workflow_timer_is_the_kind_alone() -> None:
    assert WORKFLOW_TIMER == "workflow"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "unknown kind ''"),
        ("sleep:x", "unknown kind 'sleep'"),
        ("retry", "names a unit or a delivery token"),
        ("timeout:", "names a unit or a delivery token"),
        ("workflow:x", "workflow names no subject"),
        ("workflow:", "workflow names no subject"),
    ],
)
def test_a_malformed_key_says_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(MalformedTimerKey, match=says):
        TimerKey.parse(text)


def test_a_key_is_checked_when_made() -> None:
    with pytest.raises(MalformedTimerKey):
        TimerKey(TimerKind.RETRY)
    with pytest.raises(MalformedTimerKey):
        TimerKey(TimerKind.WORKFLOW, "x")


def test_which_kinds_name_a_token_and_which_need_a_liveness_check() -> None:
    assert {kind for kind in TimerKind if kind.names_token} == {
        TimerKind.TIMEOUT,
        TimerKind.SCHEDULE,
        TimerKind.HEARTBEAT,
    }
    assert {kind for kind in TimerKind if kind.is_liveness} == {
        TimerKind.SCHEDULE,
        TimerKind.HEARTBEAT,
    }


def test_a_key_is_a_frozen_value() -> None:
    key = TimerKey(TimerKind.RETRY, "a")
    assert key == TimerKey.parse("retry:a")
    assert hash(key) == hash(TimerKey.parse("retry:a"))
    with pytest.raises(AttributeError):
        key.subject = "b"  # type: ignore[misc]
