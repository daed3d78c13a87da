"""Payloads Orbit refuses to store: NUL characters, non-finite numbers, and too many bytes."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.payloads import check_payload, payload_problem, payload_size

# Unicode text: no NUL, and no lone surrogates (half a UTF-16 pair is not text).
TEXT = st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)))
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)


@given(JSON)
def test_ordinary_json_is_storable(value: object) -> None:
    assert payload_problem(value) is None


def test_lone_surrogates_are_refused_with_their_path() -> None:
    # Half of a UTF-16 pair is not Unicode text: Postgres refuses it in jsonb.
    assert str(payload_problem({"a": ["ok", "b\ud800"]})) == (
        "holds a lone surrogate at $.a[1], which cannot be stored"
    )
    assert str(payload_problem({"\udfff": 1})) == (
        "holds a lone surrogate in a key at $, which cannot be stored"
    )
    assert payload_problem("a whole pair: \U0001f600") is None


def test_nul_characters_are_refused_with_their_path() -> None:
    assert str(payload_problem({"a": ["ok", "b\x00d"]})) == (
        "holds the NUL character at $.a[1], which cannot be stored"
    )
    assert str(payload_problem({"k\x00": 1})) == (
        "holds the NUL character in a key at $, which cannot be stored"
    )


def test_non_finite_numbers_are_refused() -> None:
    assert str(payload_problem([1.0, math.nan])) == "holds nan at $[1]; JSON numbers must be finite"
    assert (
        str(payload_problem({"x": -math.inf})) == "holds -inf at $.x; JSON numbers must be finite"
    )


def test_the_size_limit_counts_compact_utf8_bytes() -> None:
    value = {"name": "é" * 10}
    assert payload_size(value) == len('{"name":""}') + 20
    assert payload_problem(value, max_bytes=payload_size(value)) is None
    assert str(payload_problem(value, max_bytes=10)) == (
        "is 31 bytes; the limit is 10 (ORBIT_MAX_PAYLOAD_BYTES)"
    )


def test_deep_nesting_does_not_exhaust_the_stack() -> None:
    value: object = "x"
    for _ in range(50_000):
        value = [value]
    assert payload_problem(value, max_depth=100_000) is None
    problem = payload_problem(value)
    assert problem is not None
    assert "nested deeper than 64 levels" in problem.reason


@pytest.mark.parametrize(("depth", "ok"), [(63, True), (64, True), (65, False)])
def test_the_depth_limit_counts_arrays_and_objects(depth: int, ok: bool) -> None:
    value: object = 1
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    assert (payload_problem(value) is None) is ok
    if not ok:
        with pytest.raises(OrbitError) as refused:
            check_payload("the input", value)
        assert refused.value.code is ErrorCode.INVALID_REQUEST
        assert "ORBIT_MAX_PAYLOAD_DEPTH" in refused.value.message


def test_a_problem_says_whether_the_payload_is_only_too_large() -> None:
    too_large = payload_problem({"name": "é" * 10}, max_bytes=10)
    assert too_large is not None
    assert too_large.too_large
    for unstorable in ("b\x00d", math.nan, _nested(65)):
        problem = payload_problem(unstorable, max_bytes=1)
        assert problem is not None
        assert not problem.too_large, problem


def test_a_refused_request_names_the_payload_before_the_problem() -> None:
    with pytest.raises(OrbitError) as too_large:
        check_payload("the input", {"name": "é" * 10}, max_bytes=10)
    assert too_large.value.code is ErrorCode.PAYLOAD_TOO_LARGE
    assert too_large.value.message == (
        "the input is 31 bytes; the limit is 10 (ORBIT_MAX_PAYLOAD_BYTES)"
    )
    with pytest.raises(OrbitError) as unstorable:
        check_payload("the input", [math.inf], max_bytes=1)
    assert unstorable.value.code is ErrorCode.INVALID_REQUEST
    assert unstorable.value.message == "the input holds inf at $[0]; JSON numbers must be finite"


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


@given(JSON, st.integers(min_value=0, max_value=400))
def test_storable_json_is_a_problem_only_when_too_large(value: object, limit: int) -> None:
    problem = payload_problem(value, max_bytes=limit)
    assert (problem is not None) is (payload_size(value) > limit)
    assert problem is None or problem.too_large
