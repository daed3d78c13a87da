"""Delivery tokens: a MAC under the execution's secret, so that only the worker handed a
task can answer it; the same on every replay; executions without a secret as before;
shown everywhere without the MAC."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from orbit_model.attempts import child_secret, delivery_token
from orbit_model.events import (
    AttemptAlive,
    Event,
    ParentReattached,
    StaleResultIgnored,
    StepAttemptUncertain,
    StepDispatched,
    TimerFired,
    WorkflowCreated,
    event_to_json,
)
from orbit_model.shown_tokens import shown_event_data, shown_timer_key, shown_token, without_macs
from orbit_model.state import ExecutionState

secrets = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=16, max_size=40)
units = st.sampled_from(["charge", "ship[3]", "compensate:reserve", "finally:unlock"])


@given(secrets, secrets, units, st.integers(min_value=1, max_value=50))
def test_a_token_names_its_delivery_and_only_its_secret_makes_it(
    secret: str, other: str, unit: str, number: int
) -> None:
    state = ExecutionState(execution_id="e-1", delivery_secret=secret)
    token = delivery_token(state, unit, number)
    issued_as, dot, mac = token.rpartition(".")
    assert (issued_as, dot) == (f"e-1:{unit}:{number}", ".")
    assert len(mac) == 22
    assert delivery_token(state, unit, number) == token  # a replay makes the same
    if other != secret:
        forged = ExecutionState(execution_id="e-1", delivery_secret=other)
        assert delivery_token(forged, unit, number) != token


def test_an_execution_without_a_secret_keeps_the_tokens_it_had() -> None:
    assert delivery_token(ExecutionState(execution_id="e-1"), "charge", 2) == "e-1:charge:2"


def test_a_child_secret_comes_from_its_parents_secret_token_only() -> None:
    parent = ExecutionState(execution_id="p", delivery_secret="s" * 20)
    token = delivery_token(parent, "invoice", 1)
    assert child_secret(token) == child_secret(token)
    assert child_secret(token) != child_secret(delivery_token(parent, "invoice", 2))
    assert child_secret("p:invoice:1") is None  # a parent without a secret


def test_the_secret_is_never_dumped_with_the_state() -> None:
    state = ExecutionState(execution_id="e-1", delivery_secret="hidden-secret")
    assert "hidden-secret" not in state.model_dump_json()
    assert "hidden-secret" not in repr(state)


ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.:", min_size=1, max_size=40)


@given(secrets, ids, units, st.integers(min_value=1, max_value=50))
def test_a_token_is_shown_without_its_mac_wherever_it_appears(
    secret: str, execution_id: str, unit: str, number: int
) -> None:
    state = ExecutionState(execution_id=execution_id, delivery_secret=secret)
    token = delivery_token(state, unit, number)
    named, _, mac = token.rpartition(".")
    assert shown_token(token) == named
    assert shown_token(named) == named  # a token without a MAC is shown as it is
    assert shown_timer_key(f"timeout:{token}") == f"timeout:{named}"
    assert shown_timer_key(f"heartbeat:{token}") == f"heartbeat:{named}"
    events: list[Event] = [
        StepDispatched(unit=unit, attempt=1, token=token),
        AttemptAlive(unit=unit, token=token, started=True),
        StepAttemptUncertain(unit=unit, token=token, reason="lost"),
        StaleResultIgnored(unit=unit, token=token, reason="late"),
        ParentReattached(parent_token=token),
        WorkflowCreated(
            execution_id="c", workflow="w", version="1", definition_hash="h", parent_token=token
        ),
        TimerFired(key=f"timeout:{token}"),
    ]
    for event in events:
        assert mac not in json.dumps(shown_event_data(event))
        assert mac not in without_macs(event_to_json(event))
    assert named in without_macs(event_to_json(events[0]))


def test_a_timer_key_naming_a_unit_is_shown_whole() -> None:
    assert shown_timer_key("timer:wait.a.bit") == "timer:wait.a.bit"
    assert shown_timer_key("retry:ship[3]") == "retry:ship[3]"
    assert shown_token("forged.AAAA") == "forged"
