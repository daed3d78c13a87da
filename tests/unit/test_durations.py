import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbit_model.durations import DurationError, format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "milliseconds"),
    [
        ("250ms", 250),
        ("30s", 30_000),
        ("5m", 300_000),
        ("2h", 7_200_000),
        ("1d", 86_400_000),
        ("1h30m", 5_400_000),
        ("1.5s", 1_500),
        ("PT30S", 30_000),
        ("PT1M30S", 90_000),
        ("P1DT2H", 93_600_000),
        ("PT0.25S", 250),
        ("pt10m", 600_000),
        (" 10s ", 10_000),
    ],
)
def test_parses_both_forms(text: str, milliseconds: int) -> None:
    assert parse_duration(text) == milliseconds


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "expected a duration"),
        ("10", "expected a duration"),
        ("10 s", "expected a duration"),
        ("ten seconds", "expected a duration"),
        ("10y", "expected a duration"),
        ("P1Y", "expected a duration"),
        ("P1W", "expected a duration"),
        ("PT", "expected a duration"),
        ("P", "expected a duration"),
        ("0s", "longer than zero"),
        ("PT0S", "longer than zero"),
        ("0.5ms", "whole number of milliseconds"),
    ],
)
def test_refuses_what_is_not_a_duration(text: str, reason: str) -> None:
    with pytest.raises(DurationError, match=reason):
        parse_duration(text)


@given(st.integers(min_value=1, max_value=10**12))
def test_format_and_parse_round_trip(milliseconds: int) -> None:
    assert parse_duration(format_duration(milliseconds)) == milliseconds


def test_format_is_short() -> None:
    assert format_duration(5_400_000) == "1h30m"
    assert format_duration(1_500) == "1500ms"
