"""A schema's regular expressions are never run by a backtracking engine.

``^(a+)+$`` against ``"a" * 29 + "!"`` kept Python's ``re`` busy for 28 s, doubling
with each character: a definition's author could freeze whatever checks a starter's
input or a signal's payload. Contracts match patterns with jsonschema-rs (the Rust
``regex`` crate) and RE2, both linear, and refuse patterns neither can match so.
"""

import re
import time
from collections.abc import Callable
from textwrap import dedent
from typing import Any

import pytest

from orbit_model import DefinitionError, compile_definition
from orbit_model.contracts import SchemaProblem, check_schema, contract_for
from orbit_model.errors import ErrorCode, OrbitError

EVIL = "^(a+)+$"
"""Catastrophic for a backtracking engine: each ``a`` more doubles the work."""


def evil(length: int = 29) -> str:
    """Matches nothing of :data:`EVIL`, after trying every way to split its ``a``'s."""
    return "a" * length + "!"


SCHEMAS: list[tuple[str, dict[str, Any], Callable[..., Any]]] = [
    # (what, schema, a value of the given length that matches nothing and would backtrack)
    ("pattern", {"type": "string", "pattern": EVIL}, evil),
    (
        "pattern with defaults",
        {
            "type": "object",
            "properties": {"s": {"type": "string", "pattern": EVIL, "default": "a"}},
        },
        lambda n=29: {"s": evil(n)},
    ),
    (
        "patternProperties",
        {"type": "object", "patternProperties": {EVIL: {"type": "null"}}, "default": {}},
        lambda n=29: {evil(n): 1, "a": 1},
    ),
    (
        "additionalProperties",
        {"type": "object", "patternProperties": {EVIL: {}}, "additionalProperties": False},
        lambda n=29: {evil(n): 1},
    ),
    (
        "propertyNames",
        {"type": "object", "propertyNames": {"pattern": EVIL}, "properties": {"x": {"default": 1}}},
        lambda n=29: {evil(n): 1},
    ),
]


@pytest.mark.parametrize(("what", "schema", "value"), SCHEMAS, ids=[s[0] for s in SCHEMAS])
def test_no_pattern_is_run_by_pythons_re(
    monkeypatch: pytest.MonkeyPatch, what: str, schema: dict[str, Any], value: Callable[..., Any]
) -> None:
    attack = value()

    def backtracking(*args: object) -> None:
        raise AssertionError(f"Python's re ran {args[:1]}")

    contract = contract_for(schema)
    for name in ("search", "match", "fullmatch", "compile"):
        monkeypatch.setattr(re, name, backtracking)
    with pytest.raises(OrbitError) as caught:
        contract.apply(attack)
    assert caught.value.code is ErrorCode.INVALID_INPUT


@pytest.mark.parametrize(("what", "schema", "value"), SCHEMAS, ids=[s[0] for s in SCHEMAS])
def test_a_catastrophic_pattern_takes_linear_time(
    what: str, schema: dict[str, Any], value: Callable[..., Any]
) -> None:
    # Before, 29 characters took 28 s; now 100,000 take well under a millisecond.
    longer = value(100_000)
    started = time.process_time()
    with pytest.raises(OrbitError):
        contract_for(schema).apply(longer)
    assert time.process_time() - started < 1.0  # thousands of times the measured cost


def test_matching_values_are_still_accepted() -> None:
    assert contract_for({"type": "string", "pattern": EVIL}).apply("aaa") == "aaa"
    schema = {
        "type": "object",
        "patternProperties": {"^x-": {"type": "integer"}},
        "additionalProperties": False,
        "properties": {"n": {"default": 0}},
    }
    assert contract_for(schema).apply({"x-a": 1}) == {"x-a": 1, "n": 0}
    with pytest.raises(OrbitError, match=r"'y' does not match any of the regexes: '\^x-'"):
        contract_for(schema).apply({"y": 1})


def test_digits_are_ascii_for_both_validators() -> None:
    # ECMA-262, which JSON Schema's patterns follow: \d is [0-9] (Python's is any digit).
    for schema in ({"pattern": "^\\d+$"}, {"pattern": "^\\d+$", "default": "1"}):
        assert contract_for(schema).apply("12") == "12"
        with pytest.raises(OrbitError):
            contract_for(schema).apply("١٢")


@pytest.mark.parametrize(
    ("schema", "path"),
    [
        ({"properties": {"a": {"pattern": "(a)\\1"}}}, ("properties", "a", "pattern")),
        ({"pattern": "(?=a)b"}, ("pattern",)),
        ({"prefixItems": [{"pattern": "(?<!a)b"}]}, ("prefixItems", 0, "pattern")),
        ({"patternProperties": {"(?!x)": {}}}, ("patternProperties", "(?!x)")),
        ({"$defs": {"p": {"pattern": "x{2000}"}}}, ("$defs", "p", "pattern")),
        (
            {"patternProperties": {"^x": {}}, "unevaluatedProperties": False},
            ("unevaluatedProperties",),
        ),
    ],
)
def test_a_pattern_without_a_linear_match_is_refused_with_its_path(
    schema: dict[str, Any], path: tuple[object, ...]
) -> None:
    with pytest.raises(SchemaProblem) as caught:
        check_schema(schema)
    assert caught.value.path == path


def test_data_and_property_names_are_not_patterns() -> None:
    check_schema({"const": {"pattern": "(?=a)"}, "enum": [{"pattern": "(a)\\1"}]})
    check_schema({"properties": {"pattern": {"type": "string"}, "const": {"pattern": "^a"}}})
    check_schema({"unevaluatedProperties": False, "properties": {"a": {}}})


def test_a_definition_with_such_a_pattern_is_refused_at_its_line() -> None:
    text = dedent(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        signals:
          approval:
            type: object
            properties:
              code: {type: string, pattern: "^(?!0)\\\\d+$"}
        steps:
          - id: wait
            await: approval
        """
    )
    with pytest.raises(DefinitionError) as caught:
        compile_definition(text, "wf.yaml")
    (problem,) = [str(p) for p in caught.value.problems]
    assert problem.startswith(
        "wf.yaml:8: signals.approval.properties.code.pattern: not a valid JSON Schema (2020-12):"
        " the pattern '^(?!0)\\\\d+$' cannot be matched in linear time"
    )
    assert caught.value.code is ErrorCode.INVALID_DEFINITION
