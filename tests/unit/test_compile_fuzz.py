"""Whatever it is given, the compiler answers with a definition or a DefinitionError."""

import copy
import os
import random

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orbit_model import Definition, DefinitionError, Problem, compile_definition, definition_from_ir

from .workflow_strategies import leaf_paths, to_yaml, workflows

# Keys of the language, so that random documents get past "unknown key" often.
KEYS = [
    "orbit", "workflow", "version", "description", "timeout", "input", "output_schema",
    "signals", "queries", "tasks", "defaults", "steps", "finally", "output", "id", "task",
    "await", "sleep", "http", "for", "concurrency", "if", "after", "retry", "compensate",
    "continue_on_error", "max_attempts", "initial_interval", "backoff", "max_interval",
    "non_retryable", "schedule_timeout", "heartbeat_timeout", "method", "url", "headers",
    "body", "type", "properties", "required", "default", "items",
]  # fmt: skip
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(
        ["1.0.0", "30s", "PT1M", "0s", "${ input.x }", "${ steps.a.output }", "${ ( }"]
    ),
    st.text(max_size=8),
)
DOCUMENTS = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.one_of(st.sampled_from(KEYS), st.text(max_size=5)), children, max_size=6
        ),
    ),
    max_leaves=30,
)


def _outcome(text: str) -> Definition | tuple[Problem, ...]:
    """The definition, or the problems reported instead; anything else propagates."""
    try:
        return compile_definition(text, "fuzz.yaml")
    except DefinitionError as error:
        return error.problems


SETTINGS = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@SETTINGS
@given(DOCUMENTS)
def test_random_documents_never_crash_the_compiler(document: object) -> None:
    outcome = _outcome(yaml.safe_dump(document))
    if not isinstance(outcome, Definition):
        assert outcome
        assert all(problem.file == "fuzz.yaml" for problem in outcome)


@SETTINGS
@given(st.text(max_size=200))
def test_random_text_never_crashes_the_compiler(text: str) -> None:
    outcome = _outcome(text)
    assert isinstance(outcome, Definition) or outcome


@SETTINGS
@given(workflows(), st.randoms(use_true_random=False), st.data())
def test_a_valid_workflow_with_one_value_replaced_never_crashes(
    workflow: dict, rnd: random.Random, data: st.DataObject
) -> None:
    path = data.draw(st.sampled_from(leaf_paths(workflow)))
    replacement = data.draw(DOCUMENTS)
    workflow = copy.deepcopy(workflow)
    target = workflow
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = replacement
    outcome = _outcome(to_yaml(workflow, rnd))
    if isinstance(outcome, Definition):
        assert definition_from_ir(outcome.ir.canonical_json()).hash == outcome.hash
    else:
        assert outcome
