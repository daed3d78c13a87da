"""SQL statements with named parameters.

asyncpg takes positional parameters (``$1``, ``$2``, …). Orbit's statements
are written with names (``:execution_id``) instead, and :class:`Statement`
turns them into positions once, at import; a call then passes the values by
name (:meth:`Statement.args`), and a missing or unknown name is an error, not
a value silently bound to the wrong parameter. ``::type`` casts are left alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_NAME = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")


@dataclass(frozen=True)
class Statement:
    """One statement: its text for asyncpg, and the names of its parameters in order."""

    text: str
    names: tuple[str, ...]

    @classmethod
    def named(cls, sql: str) -> Statement:
        """The statement ``sql``, whose parameters are written ``:name``."""
        names: list[str] = []

        def position(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in names:
                names.append(name)
            return f"${names.index(name) + 1}"

        return cls(_NAME.sub(position, sql), tuple(names))

    def args(self, **values: Any) -> tuple[Any, ...]:
        """The values in the order of the statement's parameters.

        Raises:
            TypeError: A parameter was not given, or a value names no parameter.
        """
        missing = [name for name in self.names if name not in values]
        unknown = [name for name in values if name not in self.names]
        if missing or unknown:
            raise TypeError(f"parameters missing: {missing}, unknown: {unknown}")
        return tuple(values[name] for name in self.names)
