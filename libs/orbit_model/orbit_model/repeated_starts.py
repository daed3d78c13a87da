"""A start of an execution id that exists: a true repeat, or a conflict to refuse.

Starting an id is idempotent: the same start again answers ``created: false``.
A start that differs from the one recorded (another workflow, another version,
another input) is not a repeat but a client bug, such as ids reused: it is
refused with ``EXECUTION_EXISTS`` naming what differs, unless the caller asked
for the existing execution whatever its start was (``on_conflict:
use_existing``). A different workflow is refused even then: an id is one
workflow's.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from orbit_model.errors import ErrorCode, OrbitError

OnConflict = Literal["fail", "use_existing"]
"""What a start does when its id exists with another start: refuse (the default), or
answer with the existing execution."""


@dataclass(frozen=True)
class RecordedStart:
    """How an existing execution was started."""

    workflow: str
    version: str
    definition_hash: str
    input: Any
    """As recorded: checked against the schema, defaults applied."""


def check_repeated_start(
    execution_id: str,
    recorded: RecordedStart,
    new: RecordedStart,
    *,
    version_given: bool,
    on_conflict: OnConflict = "fail",
) -> None:
    """Accept ``new`` as a repeat of ``recorded``, or refuse it.

    ``new`` is the start as it would be recorded (its input with defaults applied,
    so that leaving out a defaulted field is still a repeat). ``version_given``
    says whether the caller named the version, or took the highest registered.

    Raises:
        OrbitError: ``EXECUTION_EXISTS``, naming what differs.
    """
    if recorded.workflow != new.workflow:
        raise OrbitError(
            ErrorCode.EXECUTION_EXISTS,
            f"execution {execution_id!r} already exists, for another workflow than"
            f" {new.workflow!r}: choose another id",
        )
    if on_conflict == "use_existing":
        return
    if recorded.definition_hash != new.definition_hash:
        if version_given:
            why = f"at version {recorded.version}, not {new.version}"
        else:
            why = (
                f"at version {recorded.version}, not {new.version} (the highest registered"
                f" now): to repeat its start, name version {recorded.version}"
            )
        raise OrbitError(
            ErrorCode.EXECUTION_EXISTS,
            f"execution {execution_id!r} of {new.workflow} already exists {why};"
            " or send on_conflict: use_existing to be answered with it as it is",
        )
    if not same_json(recorded.input, new.input):
        raise OrbitError(
            ErrorCode.EXECUTION_EXISTS,
            f"execution {execution_id!r} of {new.workflow} already exists with another input:"
            " choose another id, or send on_conflict: use_existing to be answered with it"
            " as it is",
        )


def same_json(stored: Any, given: Any) -> bool:
    """Whether two JSON values are the same as Postgres keeps them: numbers by their
    decimal value, not their spelling or Python type (``jsonb`` gives ``1e20`` back as
    ``100000000000000000000``, and ``1.0`` as ``1.0``), whatever the key order."""
    if isinstance(stored, bool) or isinstance(given, bool):
        return stored is given
    if isinstance(stored, int | float) and isinstance(given, int | float):
        return Decimal(repr(stored)) == Decimal(repr(given))
    if isinstance(stored, dict) and isinstance(given, dict):
        return stored.keys() == given.keys() and all(
            same_json(value, given[key]) for key, value in stored.items()
        )
    if isinstance(stored, list) and isinstance(given, list):
        return len(stored) == len(given) and all(map(same_json, stored, given))
    return type(stored) is type(given) and bool(stored == given)
