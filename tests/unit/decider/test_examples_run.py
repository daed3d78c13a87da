"""Every example runs to its end in the simulator, with workers that answer what its contracts ask.

The golden histories cover order-fulfilment and fan-out in detail; this test
makes sure no example is left that the decider cannot drive to completion.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orbit_model.state import ExecutionState

from .simulator import Simulator

EXAMPLES = Path(__file__).parents[3] / "examples"

RUNS: dict[str, tuple[dict[str, Any], Any, list[tuple[str, Any]], Any]] = {
    # example: (workers, input, signals, expected output)
    "hello-world": (
        {"greet": lambda i, _d: {"greeting": f"hello, {i['name']}"}},
        {},
        [],
        {"greeting": "hello, world"},
    ),
    "approval": (
        {
            "submit-request": lambda i, _d: {"submitted": i["request"]},
            "notify-requester": lambda _i, _d: {"sent": True},
        },
        {"request": "a new laptop"},
        [("decision", {"approved": True})],
        {"approved": True, "notified": True},
    ),
    "send-invoice": (
        {
            "render-invoice": lambda i, _d: {"invoice_id": f"inv-{i['order']}"},
            "mail-invoice": lambda _i, _d: {},
        },
        {"order": "o-7"},
        [],
        {"invoice_id": "inv-o-7"},
    ),
    "fan-out": (
        {
            "square": lambda i, _d: {"value": i["value"] ** 2},
            "sum": lambda i, _d: {"total": sum(i["values"])},
        },
        {"numbers": [1, 2, 3]},
        [],
        None,
    ),
    "order-fulfilment": (
        {
            "reserve-stock": lambda _i, _d: {"id": "r-1"},
            "charge-card": lambda _i, _d: {"amount": 42},
            "ship-item": lambda _i, _d: {"shipped": True},
            "workflow:send-invoice": lambda _i, _d: {"invoice_id": "inv-1"},
            "orbit.http.request": lambda _i, _d: {"status": 204},
            "release-stock": lambda _i, _d: {},
            "refund-card": lambda _i, _d: {},
            "release-lock": lambda _i, _d: {},
        },
        {"order_id": "o-1", "items": [{"sku": "a"}], "callback_url": "https://x.test"},
        [("approval", {"approved": True})],
        None,
    ),
}


def test_every_example_has_a_run() -> None:
    assert sorted(RUNS) == sorted(path.stem for path in EXAMPLES.glob("*.yaml"))


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_example_completes(name: str) -> None:
    workers, input, signals, expected = RUNS[name]
    sim = Simulator.from_yaml((EXAMPLES / f"{name}.yaml").read_text(), workers)
    sim.start(input)
    for signal, payload in signals:
        sim.work()
        sim.signal(signal, payload)
    state: ExecutionState = sim.run()
    assert state.status == "completed", state.error
    if expected is not None:
        assert state.output == expected
