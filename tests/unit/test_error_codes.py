"""Error codes and outcome codes: two enums over one set of stored texts."""

from __future__ import annotations

import pytest

from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.events import TaskFailure
from orbit_model.outcome_codes import OutcomeCode
from orbit_model.steps import failure as failure_of

BOTH = {"EXPRESSION_ERROR", "EXPRESSION_LIMIT", "TIMEOUT", "OUTPUT_CONTRACT_VIOLATION"}
BOTH |= {"HISTORY_UNREADABLE", "PAYLOAD_TOO_LARGE"}
"""Codes raised as errors and recorded as outcomes, with the same text."""


def test_each_code_is_its_own_name() -> None:
    """Stored histories and messages hold the text: it is the member's name, unchanged."""
    for code in (*ErrorCode, *OutcomeCode):
        assert code.value == code.name


def test_only_the_codes_used_both_ways_are_in_both_enums() -> None:
    assert {code.value for code in ErrorCode} & {code.value for code in OutcomeCode} == BOTH
    for name in BOTH:
        assert ErrorCode(name) == OutcomeCode(name) == name


def test_every_error_code_has_an_http_status() -> None:
    for code in ErrorCode:
        assert 400 <= code.http_status < 600, code


def test_an_outcome_is_stored_as_its_text() -> None:
    failure = failure_of(OutcomeCode.SCHEDULE_TIMEOUT, "the attempt waited too long")
    stored = failure.model_dump_json()
    assert '"code":"SCHEDULE_TIMEOUT"' in stored
    assert TaskFailure.model_validate_json(stored) == failure


@pytest.mark.parametrize("code", [ErrorCode.UNAVAILABLE, ErrorCode.CONFLICT])
def test_unavailable_and_a_lost_race_are_transient(code: ErrorCode) -> None:
    assert code.is_transient
    assert OrbitError(code, "try again").is_transient
    # A code from outside (a gateway's answer) by its name.
    assert OrbitError(code.value, "try again").is_transient


@pytest.mark.parametrize(
    "code",
    [code for code in ErrorCode if code not in (ErrorCode.UNAVAILABLE, ErrorCode.CONFLICT)],
)
def test_other_errors_are_not_transient(code: ErrorCode) -> None:
    assert not code.is_transient
    assert not OrbitError(code, "the same again fails again").is_transient


def test_a_task_s_own_code_is_not_transient() -> None:
    assert not OrbitError("CARD_DECLINED", "declined").is_transient
