"""Contracts: JSON Schema (draft 2020-12) checks with defaults applied.

A :class:`Contract` is built once per schema (building the validator is the
expensive part) and then checks many values. Checking returns a copy of the
value with every ``default`` the schema declares filled in; the caller's
value is never changed.

The reference is the ``jsonschema`` library: it fills the defaults and words
every error. A schema that declares no default is first asked of
``jsonschema-rs``, compiled, about 35 times faster: a value it accepts is
accepted, and anything else (refused, or a schema it could not build) goes to
the reference, whose answer stands. So a value is accepted only if one of
them accepts it, and refused only as the reference refuses it, with its
words. ``tests/unit/test_contracts.py`` checks that what it accepts the
reference accepts, over random values. Schemas are checked against the
metaschema the same way (:func:`check_schema`), so that compiling a
definition whose schemas are valid never loads the reference library
(:mod:`orbit_model.reference_validator`).

No regular expression of a schema (``pattern``, the keys of
``patternProperties``) is ever run by Python's backtracking ``re``: a pattern
such as ``^(a+)+$`` takes it seconds per character added to a value a starter
sends. Both validators match in time linear in the text: jsonschema-rs with
the Rust ``regex`` crate, the reference with RE2 (``google-re2``), whose
``pattern``, ``patternProperties`` and ``additionalProperties`` replace the
library's. A schema is refused when RE2 cannot compile one of its patterns
(backreferences, lookaround, more than :data:`PATTERN_MEMORY` bytes), and when
it puts ``unevaluatedProperties`` beside ``patternProperties``, which the
library would decide with ``re``. Both engines read ``\\d`` and ``\\w`` as ASCII,
as ECMA-262 does; ``\\s`` is Unicode space for jsonschema-rs, ASCII for RE2.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import jsonschema_rs

from orbit_model.canonical import canonical_json
from orbit_model.errors import DefinitionProblem, ErrorCode, OrbitError
from orbit_model.schema_patterns import pattern_problem, patterns

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"


class SchemaProblem(DefinitionProblem):
    """A schema that is not valid JSON Schema 2020-12.

    Attributes:
        path: Where in the schema the problem is.
        reason: What is wrong.
    """

    def __init__(self, path: tuple[str | int, ...], reason: str) -> None:
        super().__init__(reason)
        self.path = path
        self.reason = reason


def check_schema(schema: Any) -> None:
    """Check that ``schema`` is a valid 2020-12 schema whose patterns match in linear time.

    Raises:
        SchemaProblem: It is not, or RE2 cannot compile one of its patterns (see
            :mod:`orbit_model.schema_patterns`), with the path of the bad part.
    """
    if not isinstance(schema, dict | bool):
        raise SchemaProblem((), "a JSON Schema must be a mapping (or true/false)")
    _check_canonical_schema(canonical_json(schema))


@lru_cache(maxsize=1024)
def _check_canonical_schema(schema_json: str) -> None:
    # Checking against the metaschema costs milliseconds; the same schemas
    # come back every time a definition is compiled or registered.
    schema = json.loads(schema_json)
    if not _meets_metaschema(schema):
        from orbit_model.reference_validator import schema_problem  # noqa: PLC0415

        problem = schema_problem(schema)
        if problem is not None:
            raise SchemaProblem(*problem)
    problem = pattern_problem(schema)
    if problem is not None:
        raise SchemaProblem(*problem)


def _meets_metaschema(schema: Any) -> bool:
    """Whether ``schema`` surely meets the 2020-12 metaschema as the reference checks it:
    jsonschema-rs says so, and Python compiles each pattern (the reference checks the
    ``regex`` format). When this says no, the reference decides, and words the problem.

    The reference library alone takes about 90 ms to import: with this, a definition
    whose schemas are valid (nearly all) is compiled without it, and ``orbit validate``
    is that much faster. ``tests/unit/test_contracts.py`` holds the two to the same
    verdict over random schemas.
    """
    if isinstance(schema, dict) and schema.get("$schema", DRAFT_2020_12) != DRAFT_2020_12:
        return False  # the reference checks every schema against 2020-12
    try:
        if not jsonschema_rs.meta.is_valid(schema):
            return False
        for pattern in patterns(schema):
            re.compile(pattern)
    except Exception:  # whatever either cannot take, the reference decides
        return False
    return True


def json_path(path: Iterator[str | int] | tuple[str | int, ...] | list[str | int]) -> str:
    """``$.items[0].price`` for the path ``("items", 0, "price")``."""
    text = "$"
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part.isidentifier():
            text += f".{part}"
        else:
            text += f"[{part!r}]"
    return text


@dataclass(frozen=True)
class ContractViolation:
    """One way a value breaks its contract."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass(frozen=True)
class Contract:
    """A compiled JSON Schema; build with :func:`contract_for`.

    Attributes:
        schema: The schema, as declared.
    """

    schema: Any
    _validator: Validator = field(repr=False, compare=False)
    _fast: jsonschema_rs.Validator | None = field(default=None, repr=False, compare=False)

    def apply(self, value: Any, what: str = "value") -> Any:
        """Check ``value`` and return a copy with the schema's defaults filled in.

        Args:
            value: A JSON value.
            what: How to name the value in the error (``input``, ``signal 'approval'``).

        Raises:
            OrbitError: ``INVALID_INPUT``, naming the JSON path of each bad value.
        """
        candidate = copy.deepcopy(value)
        if self._fast is not None and _accepts(self._fast, candidate):
            return candidate
        problems = self._collect(candidate)
        if problems:
            detail = "; ".join(str(problem) for problem in problems[:5])
            more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
            raise OrbitError(
                ErrorCode.INVALID_INPUT, f"{what} does not match its schema: {detail}{more}"
            )
        return candidate

    def _collect(self, candidate: Any) -> list[ContractViolation]:
        errors = sorted(self._validator.iter_errors(candidate), key=lambda e: list(e.path))
        return [ContractViolation(json_path(tuple(error.path)), error.message) for error in errors]


def contract_for(schema: Any) -> Contract:
    """The compiled contract for ``schema``, built once per distinct schema.

    Raises:
        SchemaProblem: The schema is not valid JSON Schema 2020-12.
    """
    return _contract_for_canonical(canonical_json(schema))


@lru_cache(maxsize=1024)
def _contract_for_canonical(schema_json: str) -> Contract:
    schema = json.loads(schema_json)
    check_schema(schema)
    from orbit_model.reference_validator import validator_for  # noqa: PLC0415

    return Contract(schema=schema, _validator=validator_for(schema), _fast=_fast_for(schema))


def _fast_for(schema: Any) -> jsonschema_rs.Validator | None:
    """jsonschema-rs's validator of ``schema``; None if it declares a default (only the
    reference fills them) or jsonschema-rs cannot build it (the reference checks alone).

    Its retriever refuses every URI: the core does no I/O, and jsonschema-rs would
    otherwise fetch a remote or file ``$ref``.
    """
    if _declares_default(schema):
        return None
    try:
        return jsonschema_rs.Draft202012Validator(
            # the regex crate alone: fancy-regex would backtrack for some patterns
            schema,
            retriever=_retrieve_nothing,
            pattern_options=jsonschema_rs.RegexOptions(),
        )
    except Exception:  # whatever it cannot build, the reference still checks
        return None


def _retrieve_nothing(uri: str) -> Any:
    raise LookupError(f"the contracts retrieve no schema ({uri})")


def _declares_default(schema: Any) -> bool:
    # Any mapping with a "default" key: a property named "default" counts too, which
    # only costs that schema the fast path.
    if isinstance(schema, dict):
        return "default" in schema or any(_declares_default(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_declares_default(item) for item in schema)
    return False


def _accepts(fast: jsonschema_rs.Validator, value: Any) -> bool:
    try:
        return fast.is_valid(value)
    except Exception:  # a value it cannot take: the reference decides
        return False
