"""Durations as users write them (``250ms``, ``1h30m``, ``PT30S``), in milliseconds."""

from __future__ import annotations

import re
from decimal import Decimal

from orbit_model.errors import DefinitionProblem

_UNIT_MS: dict[str, Decimal] = {
    "ms": Decimal(1),
    "s": Decimal(1_000),
    "m": Decimal(60_000),
    "h": Decimal(3_600_000),
    "d": Decimal(86_400_000),
}

_SHORT_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_ISO = re.compile(
    r"P(?:(?P<d>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?"
)

_EXPECTED = "a duration such as 250ms, 30s, 5m, 2h, 1d, 1h30m or PT30S"


class DurationError(DefinitionProblem):
    """A duration that cannot be read; the message says what was expected."""


def parse_duration(text: str) -> int:
    """Parse a duration into whole milliseconds.

    Args:
        text: ``<number><unit>`` parts (units ``ms s m h d``, e.g. ``1h30m``) or
            an ISO 8601 duration of days, hours, minutes and seconds (``PT1M30S``).
            Years, months and weeks are refused: their length varies.

    Returns:
        The duration in milliseconds, at least 1.

    Raises:
        DurationError: The text is not a duration, is zero, or is finer than 1 ms.
    """
    stripped = text.strip()
    total = _parse_iso(stripped) if stripped[:1] in ("P", "p") else _parse_short(stripped)
    if total is None:
        raise DurationError(f"expected {_EXPECTED}, got {text!r}")
    if total != total.to_integral_value():
        raise DurationError(f"{text!r} is not a whole number of milliseconds")
    if total <= 0:
        raise DurationError(f"{text!r} must be longer than zero")
    return int(total)


def _parse_short(text: str) -> Decimal | None:
    position = 0
    total = Decimal(0)
    while position < len(text):
        match = _SHORT_PART.match(text, position)
        if match is None:
            return None
        total += Decimal(match.group(1)) * _UNIT_MS[match.group(2)]
        position = match.end()
    return total if position > 0 else None


def _parse_iso(text: str) -> Decimal | None:
    match = _ISO.fullmatch(text.upper())
    if match is None or not any(match.groupdict().values()) or text.upper().endswith("T"):
        return None
    return sum(
        (Decimal(value) * _UNIT_MS[unit] for unit, value in match.groupdict().items() if value),
        Decimal(0),
    )


def format_duration(milliseconds: int) -> str:
    """The shortest ``1h30m``-style spelling of a duration, for messages."""
    if milliseconds % 1000:
        return f"{milliseconds}ms"
    parts = []
    remaining = milliseconds
    for unit in ("d", "h", "m", "s"):
        size = int(_UNIT_MS[unit])
        count, remaining = divmod(remaining, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
