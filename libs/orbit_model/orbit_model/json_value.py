"""The one name Orbit gives a JSON value it passes along without looking inside."""

from __future__ import annotations

from typing import Any

Json = Any
"""A decoded JSON value (null, a bool, a number, a string, a list or an object).

``Any`` rather than pydantic's recursive ``JsonValue``: payloads, outputs and
answers pass through as ``json.loads`` made them, and code that looks inside one
narrows it itself (the models of :mod:`orbit_model.views` say what a view holds).
"""
