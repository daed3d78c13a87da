"""The regular expressions of JSON Schemas, matched by RE2 in linear time.

Python's ``re`` backtracks: ``^(a+)+$`` against ``"a" * 29 + "!"`` takes it
seconds, doubling with each character added, and the schema's author is not
the one who sends the value. RE2 (``google-re2``) matches in time linear in
the text and refuses what it cannot match so (backreferences, lookaround).

:func:`pattern_problem` finds, when a schema is checked, the first pattern RE2
cannot compile; :data:`RE2_KEYWORDS` replace the ``jsonschema`` library's
keywords that would run ``re`` on a value: ``pattern``, ``patternProperties``
and ``additionalProperties`` (which skips the keys ``patternProperties``
matches). The library's ``unevaluatedProperties`` also matches
``patternProperties`` with ``re``, deep inside; a schema with both is
refused instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache
from typing import Any

import re2
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator

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


Keyword = Callable[[Any, Any, Any, Mapping[str, Any]], Iterator[ValidationError]]
"""A keyword's function; its validator is ``Any``, as ``descend`` is not in the protocol."""


def _pattern(
    validator: Validator, pattern: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    # The library's keyword, word for word, with the patterns matched by RE2.
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    extras = {
        key
        for key in instance
        if key not in properties and not any(search(pattern, key) for pattern in patterns)
    }
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            listed = ", ".join(repr(each) for each in sorted(patterns))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {listed}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            joined = ", ".join(repr(each) for each in sorted(extras, key=str))
            yield ValidationError(
                f"Additional properties are not allowed ({joined} {verb} unexpected)"
            )


RE2_KEYWORDS: dict[str, Keyword] = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
}
"""The keywords that replace the library's, for a validator that never runs ``re``."""
