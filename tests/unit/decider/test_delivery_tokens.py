"""Delivery tokens: a MAC under the execution's secret, so that only the worker handed a
task can answer it; the same on every replay; executions without a secret as before."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from orbit_model.attempts import child_secret, delivery_token
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
