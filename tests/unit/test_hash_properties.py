"""The definition hash is the identity of a workflow's meaning, not of its text."""

import random

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from orbit_model import DefinitionError, compile_definition, definition_from_ir

from .workflow_strategies import changed, leaf_paths, to_yaml, workflows

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(workflows(), st.randoms(use_true_random=False), st.randoms(use_true_random=False))
def test_the_same_workflow_in_any_style_has_the_same_ir_and_hash(
    workflow: dict, first: random.Random, second: random.Random
) -> None:
    one = compile_definition(to_yaml(workflow, first), "one.yaml")
    other = compile_definition(to_yaml(workflow, second), "other.yaml")
    assert one.ir == other.ir
    assert one.ir.canonical_json() == other.ir.canonical_json()
    assert one.hash == other.hash


@SETTINGS
@given(workflows(), st.randoms(use_true_random=False), st.data())
def test_changing_any_value_changes_the_hash(
    workflow: dict, rnd: random.Random, data: st.DataObject
) -> None:
    original = compile_definition(to_yaml(workflow, rnd))
    path = data.draw(st.sampled_from(leaf_paths(workflow)), label="changed value")
    try:
        altered = compile_definition(to_yaml(changed(workflow, path), rnd))
    except DefinitionError:
        assume(False)  # the change broke the workflow: nothing to compare
        raise
    assert altered.hash != original.hash, path


@SETTINGS
@given(workflows(), st.randoms(use_true_random=False))
def test_ir_json_round_trips_to_the_same_model_and_hash(workflow: dict, rnd: random.Random) -> None:
    definition = compile_definition(to_yaml(workflow, rnd))
    again = definition_from_ir(definition.ir.canonical_json())
    assert again.ir == definition.ir
    assert again.hash == definition.hash
    assert again.ir.canonical_json() == definition.ir.canonical_json()
