"""A snapshot followed by its tail is the full replay, for random histories.

A snapshot is the state serialised as the store keeps it and parsed back
(``orbit_model.snapshots``); a load folds the events after it onto it. For
histories made by the simulator with random worker failures, crashes,
signals and cancels, cut at every point hypothesis picks, the state so
loaded equals the replay from the first event, indexes and all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orbit_model.events import Event
from orbit_model.snapshots import (
    SNAPSHOT_SHARE,
    SNAPSHOT_VERSION,
    decode_snapshot,
    encode_snapshot,
    snapshot_due,
)
from orbit_model.state import ExecutionState, evolve_all, replay
from orbit_model.state_index import build_index

from .simulator import Crash, Fail, Simulator

EXAMPLES = Path(__file__).parents[3] / "examples"
SIGNALLED = """
orbit: 1
workflow: signalled
version: 1.0.0
signals:
  go: {}
tasks:
  t: {version: "1"}
steps:
  - id: first
    await: go
  - id: each
    for: ${ input.items }
    concurrency: 3
    task: t
    retry: {max_attempts: 3, initial_interval: 1s}
    input: {item: "${ item }"}
  - id: second
    await: go
    timeout: 1h
"""


def _worker(data: st.DataObject) -> Any:
    def work(value: Any, _delivery: Any) -> Any:
        outcome = data.draw(st.sampled_from(["ok", "ok", "ok", "fail", "crash"]))
        if outcome == "fail":
            raise Fail("FLAKY", "try again")
        if outcome == "crash":
            raise Crash
        return value

    return work


def _history(data: st.DataObject) -> list[Event]:
    kind = data.draw(st.sampled_from(["signalled", "order", "fan-out"]))
    if kind == "signalled":
        sim = Simulator.from_yaml(SIGNALLED, {"t": _worker(data)})
        sim.start({"items": list(range(data.draw(st.integers(0, 8))))})
        for _ in range(data.draw(st.integers(0, 4))):
            if sim.state.terminal:
                break
            sim.signal("go", {"n": data.draw(st.integers(0, 9))})
            sim.work()
    elif kind == "order":
        sim = Simulator.from_yaml(
            (EXAMPLES / "order-fulfilment.yaml").read_text(),
            {
                "reserve-stock": lambda _i, _d: {"id": "r-1"},
                "charge-card": lambda _i, _d: {"amount": 42},
                "ship-item": _worker(data),
                "workflow:send-invoice": lambda _i, _d: {"invoice_id": "inv-1"},
                "orbit.http.request": lambda _i, _d: {"status": 204},
                "release-stock": lambda _i, _d: {},
                "refund-card": lambda _i, _d: {},
                "release-lock": lambda _i, _d: {},
            },
        )
        items = [{"sku": str(n)} for n in range(data.draw(st.integers(1, 4)))]
        sim.start({"order_id": "o-1", "items": items, "callback_url": "https://x.test"})
        sim.work()
        if data.draw(st.booleans()):
            sim.cancel("asked")
        else:
            sim.signal("approval", {"approved": data.draw(st.booleans())})
    else:
        sim = Simulator.from_yaml(
            (EXAMPLES / "fan-out.yaml").read_text(),
            {"square": _worker(data), "sum": lambda i, _d: {"total": 0}},
        )
        sim.start({"numbers": list(range(data.draw(st.integers(0, 6))))})
    sim.run(max_steps=200)
    return sim.history


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_snapshot_and_its_tail_replay_to_the_full_state(data: st.DataObject) -> None:
    history = _history(data)
    full = replay(history)
    cut = data.draw(st.integers(0, len(history)))
    snapshot = decode_snapshot(encode_snapshot(replay(history[:cut])), cut)
    assert snapshot is not None
    loaded = evolve_all(snapshot, history[cut:])
    assert loaded == full
    assert loaded.delivery_secret == full.delivery_secret
    assert loaded.timers == full.timers
    # The indexes the fold kept are those a state read whole builds.
    assert loaded.index == build_index(full.units, full.signals)
    assert full.index == build_index(full.units, full.signals)


def test_a_snapshot_not_of_its_seq_or_not_a_state_is_not_used() -> None:
    state = replay(_fixed_history())
    text = encode_snapshot(state)
    assert decode_snapshot(text, state.last_seq) == state
    assert decode_snapshot(text, state.last_seq + 1) is None
    assert decode_snapshot('{"units": 7}', 3) is None
    assert decode_snapshot("not json", 3) is None
    assert decode_snapshot("[" * 100_000, 3) is None
    assert SNAPSHOT_VERSION.startswith("1.")


def test_a_snapshot_is_due_when_an_append_crosses_a_multiple_of_k() -> None:
    assert snapshot_due(499, 500, 500)
    assert snapshot_due(498, 503, 500)
    assert not snapshot_due(500, 999, 500)
    assert snapshot_due(999, 1000, 500)
    assert not snapshot_due(0, 10_000, 0)
    assert not snapshot_due(0, 10_000, None)


def test_past_ten_k_events_a_snapshot_is_due_every_tenth_of_the_history() -> None:
    assert snapshot_due(4_999, 5_000, 500)
    assert not snapshot_due(5_000, 5_499, 500)
    assert snapshot_due(5_499, 5_500, 500)  # 5,000 + 500
    assert not snapshot_due(5_500, 6_049, 500)
    assert snapshot_due(6_049, 6_050, 500)  # 5,500 + 550
    assert snapshot_due(6_049, 6_050 + 10_000, 500)


@given(st.integers(1, 2_000), st.integers(0, 2_000_000))
def test_snapshots_are_k_or_a_tenth_of_the_history_apart(every: int, seq: int) -> None:
    # From any seq, the next snapshot is at most K or a tenth of the history away:
    # the tail a cold load folds.
    low, high = seq, seq + max(every, seq // SNAPSHOT_SHARE)
    assert snapshot_due(seq, high, every)
    while high - low > 1:  # the next point, by bisection: crossing it is monotone
        middle = (low + high) // 2
        if snapshot_due(seq, middle, every):
            high = middle
        else:
            low = middle
    # The one after it comes exactly K or a tenth of it later, whichever is more:
    # each snapshot is paid for by that many new events.
    gap = max(every, high // SNAPSHOT_SHARE)
    assert not snapshot_due(high, high + gap - 1, every)
    assert snapshot_due(high, high + gap, every)


def _fixed_history() -> list[Event]:
    sim = Simulator.from_yaml(SIGNALLED, {"t": lambda value, _d: value})
    sim.start({"items": [1, 2]})
    sim.signal("go")
    sim.run()
    return sim.history


def test_the_empty_state_round_trips() -> None:
    assert decode_snapshot(encode_snapshot(ExecutionState()), 0) == ExecutionState()
