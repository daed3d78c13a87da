"""The signal form, built from the signal's JSON Schema, and its answers read back.

An object schema whose properties are strings, numbers, integers, booleans or
enums becomes one field per property, with the browser's own checks
(``required``, ``type=number``, ``min``/``max``, ``minlength``/``maxlength``,
``pattern``) so that a wrong value is caught before it is sent. Any other
schema (nested objects, arrays, none at all) gets one JSON field. Either way
the server reads the answers into a payload and the engine checks it against
the schema before anything is recorded; its refusal is shown beside the form.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orbit_model.errors import ErrorCode, OrbitError

JSON_FIELD = "payload_json"
FIELD_PREFIX = "field."
_SCALARS = frozenset({"string", "number", "integer", "boolean"})


@dataclass(frozen=True)
class FormField:
    """One input of the form: ``name`` is the property, ``kind`` how it is entered."""

    name: str
    kind: str  # text | number | integer | boolean | choice
    required: bool
    description: str = ""
    choices: tuple[str, ...] = ()
    attributes: Mapping[str, str] = field(default_factory=dict)
    """HTML constraint attributes (``min``, ``maxlength``, ``pattern``, …)."""

    @property
    def input_name(self) -> str:
        return FIELD_PREFIX + self.name


def _kind(schema: Mapping[str, Any]) -> str | None:
    if "enum" in schema:
        values = schema["enum"]
        return "choice" if all(isinstance(v, str) for v in values) else None
    kind = schema.get("type")
    if not isinstance(kind, str) or kind not in _SCALARS:
        return None
    return "text" if kind == "string" else kind


def _attributes(schema: Mapping[str, Any]) -> dict[str, str]:
    names = {
        "minimum": "min",
        "maximum": "max",
        "minLength": "minlength",
        "maxLength": "maxlength",
        "pattern": "pattern",
    }
    return {html: str(schema[key]) for key, html in names.items() if key in schema}


def form_fields(schema: Any) -> list[FormField] | None:
    """The fields for ``schema``; None when only a JSON field can express it."""
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        return None
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return None
    required = set(schema.get("required", ()))
    fields = []
    for name, spec in properties.items():
        if not isinstance(spec, Mapping):
            return None
        kind = _kind(spec)
        if kind is None:
            return None
        fields.append(
            FormField(
                name=name,
                kind=kind,
                required=name in required,
                description=str(spec.get("description", "")),
                choices=tuple(spec.get("enum", ())),
                attributes=_attributes(spec),
            )
        )
    return fields


def _invalid(message: str) -> OrbitError:
    return OrbitError(ErrorCode.INVALID_REQUEST, message)


def _value(item: FormField, text: str) -> Any:
    if item.kind == "boolean":
        if text not in ("true", "false"):
            raise _invalid(f"{item.name} must be yes or no")
        return text == "true"
    if item.kind == "integer":
        try:
            return int(text)
        except ValueError:
            raise _invalid(f"{item.name} must be a whole number, not {text!r}") from None
    if item.kind == "number":
        try:
            number = float(text)
        except ValueError:
            raise _invalid(f"{item.name} must be a number, not {text!r}") from None
        return int(number) if number.is_integer() and "." not in text else number
    return text


def payload_of(schema: Any, form: Mapping[str, str]) -> Any:
    """The signal payload the form's answers make.

    Raises:
        OrbitError: ``INVALID_REQUEST`` for a value of the wrong kind, a required
            one left empty, or a JSON field that is not JSON.
    """
    fields = form_fields(schema)
    if fields is None:
        text = form.get(JSON_FIELD, "").strip()
        if not text:
            return None
        try:
            return json.loads(text)
        except ValueError as error:
            raise _invalid(f"the payload is not valid JSON: {error}") from None
    payload: dict[str, Any] = {}
    for item in fields:
        text = form.get(item.input_name, "").strip()
        if not text:
            if item.required:
                raise _invalid(f"{item.name} is required")
            continue
        payload[item.name] = _value(item, text)
    return payload
