"""Compile problems: where each one is, and how it reads."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.yaml_source import Path

_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")


def format_path(path: Path) -> str:
    """``steps[2].retry.max_attempts`` for ``("steps", 2, "retry", "max_attempts")``.

    A key with other characters is bracketed: ``tasks['orbit.mail'].version``.
    """
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif not _PLAIN_KEY.fullmatch(part):
            text += f"[{part!r}]"
        else:
            text += f".{part}" if text else part
    return text


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when a candidate is close to ``name``, else ``""``."""
    close = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a definition.

    Attributes:
        file: The file name given to the compiler.
        line: 1-based line, or None for a definition that has no source text
            (an IR submitted as JSON).
        path: Where in the definition, e.g. ``steps[2].if``.
        message: What is wrong.
    """

    file: str
    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class DefinitionError(OrbitError):
    """A definition that does not compile; it lists every problem found."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(sorted(problems, key=lambda p: (p.line or 0, p.path, p.message)))
        super().__init__(
            ErrorCode.INVALID_DEFINITION, "\n".join(str(problem) for problem in self.problems)
        )
