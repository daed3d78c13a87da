"""What a payload (an input, a result, a signal) must be for Orbit to store it.

JSON data that Postgres ``jsonb`` cannot hold is refused before anything is
stored: strings with the NUL character or a lone surrogate (half of a UTF-16
pair, which is not Unicode text), and the non-finite numbers NaN and
Infinity (which JSON has no words for). A size limit, when one is set,
counts the bytes of the compact JSON text.
"""

from __future__ import annotations

import json
import math
from typing import Any

from orbit_model.errors import ErrorCode, OrbitError


def payload_problem(value: Any, max_bytes: int | None = None) -> str | None:
    """Why ``value`` cannot be stored, or None when it can."""
    problem = _unstorable(value, "$")
    if problem is not None:
        return problem
    if max_bytes is not None:
        size = payload_size(value)
        if size > max_bytes:
            return f"is {size} bytes; the limit is {max_bytes} (ORBIT_MAX_PAYLOAD_BYTES)"
    return None


def check_payload(what: str, value: Any, max_bytes: int | None = None) -> None:
    """Refuse a payload a client sent that cannot be stored, or is too large.

    Raises:
        OrbitError: ``INVALID_REQUEST`` naming where the bad value is, or
            ``PAYLOAD_TOO_LARGE`` with its size and the limit.
    """
    problem = _unstorable(value, "$")
    if problem is not None:
        raise OrbitError(ErrorCode.INVALID_REQUEST, f"{what} {problem}")
    if max_bytes is None:
        return
    size = payload_size(value)
    if size > max_bytes:
        raise OrbitError(
            ErrorCode.PAYLOAD_TOO_LARGE,
            f"{what} is {size} bytes; the limit is {max_bytes} (ORBIT_MAX_PAYLOAD_BYTES)",
        )


def payload_size(value: Any) -> int:
    """Bytes of the compact JSON text of ``value``."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def _unstorable(value: Any, path: str) -> str | None:
    # Iterative, so a deeply nested payload cannot exhaust the stack.
    pending: list[tuple[Any, str]] = [(value, path)]
    while pending:
        item, where = pending.pop()
        if isinstance(item, str):
            problem = _text_problem(item)
            if problem is not None:
                return f"holds {problem} at {where}, which cannot be stored"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return f"holds {item} at {where}; JSON numbers must be finite"
        elif isinstance(item, dict):
            for key, inner in item.items():
                problem = _text_problem(key) if isinstance(key, str) else None
                if problem is not None:
                    return f"holds {problem} in a key at {where}, which cannot be stored"
                pending.append((inner, f"{where}.{key}"))
        elif isinstance(item, list | tuple):
            pending.extend((inner, f"{where}[{index}]") for index, inner in enumerate(item))
    return None


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "the NUL character"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "a lone surrogate"
    return None
