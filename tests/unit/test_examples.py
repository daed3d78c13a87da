"""Every example compiles, and the order workflow uses every construct."""

from pathlib import Path

import pytest

from orbit_model import compile_definition
from orbit_model.ir import CallStep

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))


def test_there_are_examples() -> None:
    assert {path.stem for path in EXAMPLES} >= {"hello-world", "fan-out", "order-fulfilment"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.name)
def test_example_compiles(path: Path) -> None:
    definition = compile_definition(path.read_text(), path.name)
    assert definition.ir.name == path.stem
    assert definition.hash.startswith("sha256:")


def test_order_fulfilment_uses_every_step_kind_and_construct() -> None:
    path = next(path for path in EXAMPLES if path.stem == "order-fulfilment")
    ir = compile_definition(path.read_text()).ir
    assert {step.kind for step in ir.steps} == {"task", "await", "sleep", "workflow", "http"}
    calls = [step for step in ir.steps if isinstance(step, CallStep)]
    assert any(step.for_each is not None and step.concurrency for step in calls)
    assert any(step.compensate is not None for step in calls)
    assert any(step.continue_on_error for step in calls)
    assert any(step.when is not None for step in ir.steps)
    assert any(step.explicit_after for step in ir.steps)
    assert any(step.call.timeouts.heartbeat_ms for step in calls)
    assert any(step.call.timeouts.schedule_ms for step in calls)
    assert ir.finally_steps
    assert ir.queries
    assert ir.signals
    assert ir.timeout_ms
