"""Committed histories replay to committed states, and the decider still writes them.

Each scenario runs in the simulator; its history and final state are kept
under ``tests/golden/``. A change of the fold shows as a replay that no
longer reaches the committed state; a change of the decider as a scenario
that no longer writes the committed history. Both fail here: a change of
behaviour must be deliberate (regenerate with ``ORBIT_UPDATE_GOLDEN=1`` and
review the diff), because running executions replay the old histories.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from orbit_model.events import Event, StepSucceeded, events_from_json
from orbit_model.state import ExecutionState, replay

from .simulator import Crash, Fail, Simulator

GOLDEN = Path(__file__).parents[2] / "golden"
EXAMPLES = Path(__file__).parents[3] / "examples"
_EVENTS = TypeAdapter(list[Event])


def _order(approved: bool, charge_fails: bool = False) -> Simulator:
    lost = {"ship[1]"}

    def ship(_input: object, delivery: object) -> object:
        if delivery.unit in lost:  # type: ignore[attr-defined]
            lost.discard(delivery.unit)  # type: ignore[attr-defined]
            raise Crash
        return {"shipped": True}

    def charge(_input: object, _delivery: object) -> object:
        if charge_fails:
            raise Fail("CARD_DECLINED", "declined", retryable=False)
        return {"amount": 42}

    sim = Simulator.from_yaml(
        (EXAMPLES / "order-fulfilment.yaml").read_text(),
        {
            "reserve-stock": lambda _i, _d: {"id": "r-1"},
            "charge-card": charge,
            "ship-item": ship,
            "workflow:send-invoice": lambda _i, _d: {"invoice_id": "inv-1"},
            "orbit.http.request": lambda _i, _d: {"status": 204},
            "release-stock": lambda _i, _d: {},
            "refund-card": lambda _i, _d: {},
            "release-lock": lambda _i, _d: {},
        },
    )
    sim.start(
        {"order_id": "o-1", "items": [{"sku": "a"}, {"sku": "b"}], "callback_url": "https://x.test"}
    )
    sim.work()
    sim.signal("approval", {"approved": approved})
    sim.run()
    return sim


def _fan_out_with_retries() -> Simulator:
    failures = {"squares[2]": 2}

    def square(value: dict[str, int], delivery: object) -> object:
        unit = delivery.unit  # type: ignore[attr-defined]
        if failures.get(unit, 0) > 0:
            failures[unit] -= 1
            raise Fail("FLAKY", "try again")
        return {"value": value["value"] ** 2}

    sim = Simulator.from_yaml(
        (EXAMPLES / "fan-out.yaml").read_text(),
        {"square": square, "sum": lambda i, _d: {"total": sum(i["values"])}},
    )
    sim.start({"numbers": [1, 2, 3, 4, 5]})
    sim.run()
    return sim


def _cancelled_order() -> Simulator:
    sim = Simulator.from_yaml(
        (EXAMPLES / "order-fulfilment.yaml").read_text(),
        {
            "reserve-stock": lambda _i, _d: {"id": "r-1"},
            "release-stock": lambda _i, _d: {},
            "release-lock": lambda _i, _d: {},
        },
    )
    sim.start({"order_id": "o-2", "items": [{}], "callback_url": "https://x.test"})
    sim.work()
    sim.cancel("customer asked")
    sim.run()
    return sim


SCENARIOS: dict[str, Callable[[], Simulator]] = {
    "order-approved": lambda: _order(approved=True),
    "order-declined-card": lambda: _order(approved=True, charge_fails=True),
    "order-not-approved": lambda: _order(approved=False),
    "order-cancelled": _cancelled_order,
    "fan-out-retries": _fan_out_with_retries,
}


def _paths(name: str) -> tuple[Path, Path]:
    return GOLDEN / f"{name}.history.json", GOLDEN / f"{name}.state.json"


def _dump(value: object) -> str:
    return json.dumps(value, indent=1, sort_keys=True) + "\n"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_decider_still_writes_the_committed_history(name: str) -> None:
    sim = SCENARIOS[name]()
    history_path, state_path = _paths(name)
    history = _dump(_EVENTS.dump_python(sim.history, mode="json"))
    state = _dump(sim.state.model_dump(mode="json"))
    if os.environ.get("ORBIT_UPDATE_GOLDEN") == "1":
        history_path.write_text(history)
        state_path.write_text(state)
    assert history_path.read_text() == history
    assert state_path.read_text() == state


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_committed_history_replays_to_its_committed_state(name: str) -> None:
    history_path, state_path = _paths(name)
    events = events_from_json(history_path.read_text())
    expected = ExecutionState.model_validate_json(state_path.read_text())
    assert replay(events) == expected
    assert expected.terminal


EARLIER = sorted(
    path.name.removesuffix(".history.json") for path in (GOLDEN / "earlier").glob("*.history.json")
)


@pytest.mark.parametrize("name", EARLIER)
def test_a_history_an_earlier_decider_wrote_still_replays(name: str) -> None:
    """``golden/earlier/`` keeps histories as the decider wrote them before a change
    of what it writes (an execution's error without its cause chain, say): running
    executions have such histories, and they must still replay to the same state."""
    earlier = GOLDEN / "earlier"
    events = events_from_json((earlier / f"{name}.history.json").read_text())
    expected = ExecutionState.model_validate_json((earlier / f"{name}.state.json").read_text())
    assert replay(events) == expected
    assert (
        _dump(replay(events).model_dump(mode="json"))
        == (earlier / f"{name}.state.json").read_text()
    )


def test_an_altered_history_does_not_replay_to_the_committed_state() -> None:
    history_path, state_path = _paths("order-approved")
    events = events_from_json(history_path.read_text())
    expected = ExecutionState.model_validate_json(state_path.read_text())
    position = next(
        i for i, e in enumerate(events) if isinstance(e, StepSucceeded) and e.unit == "charge"
    )
    altered = [
        *events[:position],
        events[position].model_copy(update={"output": {"amount": 1}}),
        *events[position + 1 :],
    ]
    assert replay(altered) != expected
    assert replay(events[:position] + events[position + 1 :]) != expected


def test_a_history_with_an_unknown_event_is_rejected() -> None:
    history_path, _ = _paths("order-approved")
    data = json.loads(history_path.read_text())
    data[3]["type"] = "StepTeleported"
    with pytest.raises(ValidationError):
        events_from_json(json.dumps(data))
