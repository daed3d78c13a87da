"""A start of a known id: a true repeat, or a conflict named by what differs."""

from __future__ import annotations

import pytest

from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.repeated_starts import RecordedStart, check_repeated_start, same_json

RECORDED = RecordedStart("order", "1.0.0", "sha256:a", {"n": 1, "mode": "fast"})


def refusal(new: RecordedStart, **options: object) -> str:
    with pytest.raises(OrbitError) as refused:
        check_repeated_start("o-1", RECORDED, new, **options)  # type: ignore[arg-type]
    assert refused.value.code is ErrorCode.EXECUTION_EXISTS
    return refused.value.message


def test_the_same_start_is_a_repeat_whatever_the_key_order() -> None:
    same = RecordedStart("order", "1.0.0", "sha256:a", {"mode": "fast", "n": 1})
    check_repeated_start("o-1", RECORDED, same, version_given=True)


def test_another_input_is_refused_unless_the_existing_execution_is_asked_for() -> None:
    other = RecordedStart("order", "1.0.0", "sha256:a", {"n": 2, "mode": "fast"})
    assert "another input" in refusal(other, version_given=True)
    same_value = RecordedStart("order", "1.0.0", "sha256:a", {"n": 1.0, "mode": "fast"})
    check_repeated_start("o-1", RECORDED, same_value, version_given=True)
    truthy = RecordedStart("order", "1.0.0", "sha256:a", {"n": True, "mode": "fast"})
    assert "another input" in refusal(truthy, version_given=True)
    check_repeated_start("o-1", RECORDED, other, version_given=True, on_conflict="use_existing")


def test_another_version_names_both_and_the_version_to_give() -> None:
    newer = RecordedStart("order", "1.1.0", "sha256:b", RECORDED.input)
    message = refusal(newer, version_given=False)
    assert "at version 1.0.0, not 1.1.0 (the highest registered now)" in message
    assert "name version 1.0.0" in message
    assert "highest" not in refusal(newer, version_given=True)
    check_repeated_start("o-1", RECORDED, newer, version_given=False, on_conflict="use_existing")


def test_another_workflow_is_refused_even_for_the_existing_one_and_not_named() -> None:
    other = RecordedStart("refund", "1.0.0", "sha256:c", RECORDED.input)
    for on_conflict in ("fail", "use_existing"):
        message = refusal(other, version_given=True, on_conflict=on_conflict)
        assert "another workflow than 'refund'" in message
        assert "order" not in message


def test_numbers_compare_as_postgres_keeps_them() -> None:
    # What Postgres gives back of '[1.2345678901234566e+25, 1e20, 1.0, 0.1, 1e-7]'::jsonb:
    # a large float as the integer it spells, a small one in positional notation.
    stored = [12345678901234566000000000, 100000000000000000000, 1.0, 0.1, 0.0000001]
    assert same_json(stored, [1.2345678901234566e25, 1e20, 1.0, 0.1, 1e-7])
    assert same_json({"a": 1, "b": [1.5, "x", None]}, {"b": [1.5, "x", None], "a": 1.0})
    assert not same_json({"a": 1}, {"a": 2})
    assert not same_json({"a": 0}, {"a": False})
    assert not same_json({"a": None}, {})
    assert not same_json(["1"], [1])
