"""Which await step takes a signal (orbit_model.signal_takers): what the gateway tells the
sender, checked against what the decider then does."""

from __future__ import annotations

from typing import Any

import pytest

from orbit_model.inputs import accept_cancel, accept_signal
from orbit_model.signal_takers import SignalTakers, signal_takers

from .simulator import Simulator
from .test_scenarios import make, tok

TWO_AWAITS = """
signals: {go: {}, note: {}}
tasks:
  t: {version: "1"}
steps:
  - id: first
    await: go
  - id: work
    task: t
  - id: second
    await: go
"""


def send(sim: Simulator, name: str, payload: Any = None) -> int:
    """Record the signal as the gateway does (the decider's turn comes after); its seq."""
    sim.append(accept_signal(sim.state, sim.definition, name, payload))
    return sim.state.last_seq


def takers(sim: Simulator, seq: int) -> SignalTakers:
    return signal_takers(sim.state, sim.definition, seq)


def test_a_waiting_await_takes_it_now_and_says_so_once_it_has() -> None:
    sim = make(TWO_AWAITS)
    sim.start()
    seq = send(sim, "go", 1)
    assert takers(sim, seq) == SignalTakers("now", ("first",))
    sim.settle()
    assert sim.state.unit("first").output == 1
    assert takers(sim, seq) == SignalTakers("already", ("first",))


def test_with_no_await_waiting_it_is_kept_for_the_awaits_not_reached_yet() -> None:
    sim = make(TWO_AWAITS)
    sim.start()
    sim.signal("go", 1)  # first takes it; work runs
    seq = send(sim, "go", 2)
    assert takers(sim, seq) == SignalTakers("later", ("second",))
    sim.result(tok("work"), "done")
    assert sim.state.unit("second").output == 2  # as told: kept, then taken


def test_signals_beyond_what_the_awaits_left_can_take_are_never_taken() -> None:
    sim = make(TWO_AWAITS)
    sim.start()
    seqs = [send(sim, "go", n) for n in range(4)]  # before the decider's turn
    assert [takers(sim, seq).taken for seq in seqs] == ["now", "later", "never", "never"]
    assert takers(sim, seqs[3]).steps == ()
    assert takers(sim, send(sim, "note")) == SignalTakers("never", ())  # no await of it


def test_a_stopping_execution_takes_no_more_signals() -> None:
    sim = make(TWO_AWAITS)
    sim.start()
    sim.append(accept_cancel(sim.state, "no longer needed"))
    seq = send(sim, "go")
    assert takers(sim, seq) == SignalTakers("never", ())
    sim.settle()
    assert sim.state.unit("first").output is None
    assert takers(sim, seq) == SignalTakers("never", ())


def test_an_unknown_seq_is_a_lookup_error() -> None:
    sim = make(TWO_AWAITS)
    sim.start()
    with pytest.raises(LookupError):
        takers(sim, 1)
