"""Signals with a request id are recorded once, however often they are sent."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.events import SignalReceived
from orbit_model.inputs import accept_signal, signal_seq
from orbit_model.messages import SignalExecution

from .test_scenarios import make

AWAITS = """
signals: {note: {}, go: {}}
steps:
  - id: wait
    await: go
"""


def test_a_request_id_recorded_before_adds_nothing_and_names_the_first_seq() -> None:
    sim = make(AWAITS)
    sim.start()
    events = accept_signal(sim.state, sim.definition, "note", "first", request_id="r-1")
    assert events == [SignalReceived(name="note", payload="first", request_id="r-1")]
    sim.append(events)
    first = sim.state.last_seq
    assert signal_seq(sim.state, "r-1") == first
    # Sent again (a retry, a redelivery): nothing, whatever it carries this time.
    assert accept_signal(sim.state, sim.definition, "note", "again", request_id="r-1") == []
    assert accept_signal(sim.state, sim.definition, "go", None, request_id="r-1") == []
    # Another id, or none, is another signal.
    assert accept_signal(sim.state, sim.definition, "note", "first", request_id="r-2")
    assert accept_signal(sim.state, sim.definition, "note", "first")
    assert signal_seq(sim.state, "r-2") is None


def test_a_repeated_signal_is_answered_even_once_the_execution_ended() -> None:
    sim = make(AWAITS)
    sim.start()
    sim.append(accept_signal(sim.state, sim.definition, "go", None, request_id="r-go"))
    sim.settle()
    assert sim.state.status == "completed"
    assert accept_signal(sim.state, sim.definition, "go", None, request_id="r-go") == []
    with pytest.raises(OrbitError) as finished:
        accept_signal(sim.state, sim.definition, "go", None, request_id="r-new")
    assert finished.value.code is ErrorCode.EXECUTION_FINISHED


@pytest.mark.parametrize("request_id", ["", "a b", "x" * 201, "nul\x00", "é"])
def test_a_malformed_request_id_is_refused(request_id: str) -> None:
    sim = make(AWAITS)
    sim.start()
    with pytest.raises(OrbitError) as refused:
        accept_signal(sim.state, sim.definition, "note", None, request_id=request_id)
    assert refused.value.code is ErrorCode.INVALID_REQUEST


@given(st.lists(st.sampled_from(["a", "b", "c", None]), max_size=12))
def test_each_request_id_is_recorded_once_in_any_order(ids: list[str | None]) -> None:
    sim = make(AWAITS)
    sim.start()
    for request_id in ids:
        sim.append(accept_signal(sim.state, sim.definition, "note", None, request_id=request_id))
    recorded = [s.request_id for s in sim.state.signals]
    assert sorted(i for i in recorded if i) == sorted({i for i in ids if i})
    assert recorded.count(None) == ids.count(None)
    assert all(
        sim.history[s.seq - 1] == SignalReceived(name="note", request_id=s.request_id)
        for s in sim.state.signals
    )


def test_an_amqp_signal_is_known_by_its_message_id_when_it_has_no_request_id() -> None:
    bare = SignalExecution(execution_id="e-1", name="go")
    assert bare.identified("m-1").request_id == "m-1"
    assert bare.identified(None).request_id is None
    assert bare.identified("not one: spaces").request_id is None  # left without an id
    named = bare.model_copy(update={"request_id": "r-1"})
    assert named.identified("m-1").request_id == "r-1"
