"""What a payload (an input, a result, a signal) must be for Orbit to store it.

JSON data that Postgres ``jsonb`` cannot hold is refused before anything is
stored: strings with the NUL character or a lone surrogate (half of a UTF-16
pair, which is not Unicode text), and the non-finite numbers NaN and
Infinity (which JSON has no words for). Nesting is bounded
(``ORBIT_MAX_PAYLOAD_DEPTH``, 64 by default): a value nested deeper than the
JSON readers of Orbit and of its clients can take would be stored and then
could never be read back. A size limit, when one is set, counts the bytes of
the compact JSON text. Every check is iterative, so no payload can exhaust
the stack.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from orbit_model.errors import ErrorCode, OrbitError

DEFAULT_MAX_DEPTH = 64
"""How deep a payload may nest by default (``ORBIT_MAX_PAYLOAD_DEPTH``): ``[[1]]`` is 2 deep."""


@dataclass(frozen=True, slots=True)
class PayloadProblem:
    """Why a payload cannot be stored."""

    reason: str
    """What is wrong, to follow the payload's name in a sentence (``is 31 bytes; the
    limit is 10 (ORBIT_MAX_PAYLOAD_BYTES)``, ``holds nan at $.x; …``)."""
    too_large: bool = False
    """Over the size limit (``ORBIT_MAX_PAYLOAD_BYTES``); else it cannot be stored at any
    size (a NUL, a lone surrogate, a non-finite number, nesting too deep)."""

    def __str__(self) -> str:
        return self.reason


def payload_problem(
    value: Any, max_bytes: int | None = None, max_depth: int = DEFAULT_MAX_DEPTH
) -> PayloadProblem | None:
    """Why ``value`` cannot be stored, or None when it can."""
    unstorable = _unstorable(value, "$", max_depth)
    if unstorable is not None:
        return PayloadProblem(unstorable)
    if max_bytes is not None:
        size = payload_size(value)
        if size > max_bytes:
            return PayloadProblem(
                f"is {size} bytes; the limit is {max_bytes} (ORBIT_MAX_PAYLOAD_BYTES)",
                too_large=True,
            )
    return None


def check_payload(
    what: str, value: Any, max_bytes: int | None = None, max_depth: int = DEFAULT_MAX_DEPTH
) -> None:
    """Refuse a payload a client sent that cannot be stored, is nested too deep, or is
    too large.

    Raises:
        OrbitError: ``INVALID_REQUEST`` naming where the bad value is, or
            ``PAYLOAD_TOO_LARGE`` with its size and the limit.
    """
    problem = payload_problem(value, max_bytes, max_depth)
    if problem is not None:
        code = ErrorCode.PAYLOAD_TOO_LARGE if problem.too_large else ErrorCode.INVALID_REQUEST
        raise OrbitError(code, f"{what} {problem}")


def payload_size(value: Any) -> int:
    """Bytes of the compact JSON text of ``value``."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def _unstorable(value: Any, path: str, max_depth: int) -> str | None:
    # Iterative, so a deeply nested payload cannot exhaust the stack.
    pending: list[tuple[Any, str, int]] = [(value, path, 0)]
    while pending:
        item, where, depth = pending.pop()
        if isinstance(item, dict | list | tuple):
            depth += 1
            if depth > max_depth:
                return (
                    f"is nested deeper than {max_depth} levels at {where} (ORBIT_MAX_PAYLOAD_DEPTH)"
                )
        if isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                return f"holds {problem} at {where}, which cannot be stored"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return f"holds {item} at {where}; JSON numbers must be finite"
        elif isinstance(item, dict):
            for key, inner in item.items():
                problem = text_problem(key) if isinstance(key, str) else None
                if problem is not None:
                    return f"holds {problem} in a key at {where}, which cannot be stored"
                pending.append((inner, f"{where}.{key}", depth))
        elif isinstance(item, list | tuple):
            pending.extend((inner, f"{where}[{index}]", depth) for index, inner in enumerate(item))
    return None


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored (a NUL, a lone surrogate), or None when it can."""
    if "\x00" in text:
        return "the NUL character"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "a lone surrogate"
    return None
