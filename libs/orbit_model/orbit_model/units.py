"""Unit keys: which step (and which part of it) an event concerns."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

COMPENSATE_PREFIX = "compensate:"
FINALLY_PREFIX = "finally:"
_ELEMENT = re.compile(r"(?P<step>[^\[]+)\[(?P<index>\d+)\]")

UnitRole = Literal["step", "element", "compensate", "finally"]


@dataclass(frozen=True)
class UnitKey:
    """A parsed unit key."""

    step: str
    role: UnitRole
    index: int | None = None

    def __str__(self) -> str:
        if self.role == "element":
            return element_key(self.step, self.index or 0)
        if self.role == "compensate":
            return COMPENSATE_PREFIX + self.step
        if self.role == "finally":
            return FINALLY_PREFIX + self.step
        return self.step


def element_key(step: str, index: int) -> str:
    """``ship[3]``: element 3 of the ``for`` step ``ship``."""
    return f"{step}[{index}]"


def parse_unit(key: str) -> UnitKey:
    """The step and role a unit key names."""
    if key.startswith(COMPENSATE_PREFIX):
        return UnitKey(key.removeprefix(COMPENSATE_PREFIX), "compensate")
    if key.startswith(FINALLY_PREFIX):
        return UnitKey(key.removeprefix(FINALLY_PREFIX), "finally")
    match = _ELEMENT.fullmatch(key)
    if match:
        return UnitKey(match["step"], "element", int(match["index"]))
    return UnitKey(key, "step")
