"""The reference validator: the ``jsonschema`` library, with defaults and RE2.

It is the heavy half of :mod:`orbit_model.contracts` (the library loads in
about 90 ms), imported only when a contract is built or a schema needs the
reference's verdict: ``orbit validate`` and a definition's registration check
schemas with jsonschema-rs, and come here only for the words of a problem.

Two extensions, both documented ways of extending the library:

- ``properties`` fills the defaults of absent properties before they are
  checked, so defaults are validated too;
- ``pattern``, ``patternProperties`` and ``additionalProperties`` (which skips
  the keys ``patternProperties`` matches) match with RE2, never with ``re``
  (:mod:`orbit_model.schema_patterns`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jsonschema
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.protocols import Validator

from orbit_model.schema_patterns import Path, search

Keyword = Callable[[Any, Any, Any, Mapping[str, Any]], Iterator[ValidationError]]
"""A keyword's function; its validator is ``Any``, as ``descend`` is not in the protocol."""


def schema_problem(schema: Any) -> tuple[Path, str] | None:
    """Where ``schema`` breaks the 2020-12 metaschema, and how, in the library's words;
    None when it does not."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        return tuple(error.path), error.message
    return None


def validator_for(schema: Any) -> Validator:
    """The reference validator of ``schema`` (checked already): fills defaults, matches
    patterns with RE2."""
    return _DefaultingValidator(schema)  # type: ignore[no-any-return]


def _properties_with_defaults(
    validator: Validator, properties: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if isinstance(instance, dict):
        for name, subschema in properties.items():
            if isinstance(subschema, Mapping) and "default" in subschema and name not in instance:
                instance[name] = copy.deepcopy(subschema["default"])
    yield from _PROPERTIES(validator, properties, instance, schema)


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


_PROPERTIES = Draft202012Validator.VALIDATORS["properties"]
_DefaultingValidator = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator, {**RE2_KEYWORDS, "properties": _properties_with_defaults}
)
