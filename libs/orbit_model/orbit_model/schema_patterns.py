"""The regular expressions of JSON Schemas, matched by RE2 in linear time.

Python's ``re`` backtracks: ``^(a+)+$`` against ``"a" * 29 + "!"`` takes it
seconds, doubling with each character added, and the schema's author is not
the one who sends the value. RE2 (``google-re2``) matches in time linear in
the text and refuses what it cannot match so (backreferences, lookaround).

:func:`pattern_problem` finds, when a schema is checked, the first pattern RE2
cannot compile; :func:`search` matches one (the reference validator's keywords,
:mod:`orbit_model.reference_validator`, call it). The library's
``unevaluatedProperties`` matches ``patternProperties`` with ``re``, deep
inside; a schema with both is refused instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import re2

PATTERN_MEMORY = 1 << 20
"""The most memory RE2 gives one compiled pattern, its DFA cache included (1 MiB):
a larger pattern is refused, and matching stays linear within it."""

Path = tuple[str | int, ...]

_DATA = frozenset({"const", "enum", "default", "examples"})
"""Keywords whose values are JSON data, not schemas: a ``pattern`` key in them is data."""
_NAMED_SCHEMAS = frozenset({"properties", "patternProperties", "$defs", "dependentSchemas"})
"""Keywords whose values map names (not keywords) to schemas."""


@lru_cache(maxsize=1024)
def _compiled(pattern: str) -> Any:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is reported as a schema problem
    options.max_mem = PATTERN_MEMORY
    return re2.compile(pattern, options=options)


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text`` (JSON Schema's ``pattern``)."""
    return _compiled(pattern).search(text) is not None


def pattern_problem(schema: Any) -> tuple[Path, str] | None:
    """Where ``schema`` has a pattern RE2 cannot compile, or ``unevaluatedProperties``
    beside ``patternProperties``, and why; None when it has neither."""
    unevaluated: Path | None = None
    pattern_properties = False
    for path, pattern in _patterns(schema, ()):
        if pattern is None:
            unevaluated = unevaluated or path
            continue
        pattern_properties = pattern_properties or "patternProperties" in path[-2:-1]
        try:
            _compiled(pattern)
        except re2.error as error:
            reason = error.args[0].decode() if error.args else "cannot compile"
            return path, (
                f"the pattern {pattern!r} cannot be matched in linear time ({reason}): "
                "Orbit matches with RE2, which has no backreferences or lookaround"
            )
    if unevaluated is not None and pattern_properties:
        return unevaluated, (
            "unevaluatedProperties cannot be used in a schema with patternProperties "
            "(the reference validator would match those patterns by backtracking)"
        )
    return None


def patterns(schema: Any) -> Iterator[str]:
    """Every pattern of ``schema`` (``pattern`` values and ``patternProperties`` keys)."""
    return (pattern for _, pattern in _patterns(schema, ()) if pattern is not None)


def _patterns(node: Any, path: Path) -> Iterator[tuple[Path, str | None]]:
    """Every pattern of a schema with its path, and ``(path, None)`` for each
    ``unevaluatedProperties``. Iterative: a schema may nest deeply."""
    pending: list[tuple[Any, Path, bool]] = [(node, path, False)]
    while pending:
        item, where, named = pending.pop()
        if isinstance(item, list):
            pending.extend((inner, (*where, index), False) for index, inner in enumerate(item))
        if not isinstance(item, dict):
            continue
        for key, value in item.items():
            inner_path = (*where, key)
            if named:
                pending.append((value, inner_path, False))
                continue
            if key in _DATA:
                continue
            if key == "pattern" and isinstance(value, str):
                yield inner_path, value
            elif key == "patternProperties" and isinstance(value, dict):
                yield from (((*inner_path, name), name) for name in value)
            elif key == "unevaluatedProperties":
                yield inner_path, None
            pending.append((value, inner_path, key in _NAMED_SCHEMAS))
