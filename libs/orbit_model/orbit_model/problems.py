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


_CUTOFF = 0.6
_MOST_CANDIDATES = 1000
"""Past this many names, no guess: a definition may declare tens of thousands."""
_MOST_COMPARED = 100
"""Full comparisons for one guess (some 20 µs each, more for long names)."""
_LONGEST = 100
"""The longest name guessed for, as long as the longest identifier."""


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when a candidate is close to ``name``, else ``""``.

    The candidate :func:`difflib.get_close_matches` picks (the highest ratio,
    then the greatest name), with bounded work: a workflow may hold a thousand
    steps, all named alike. Candidates are taken in order of the ratio's
    cheapest upper bound (their lengths), and compared in full only while that
    bound, then the next (the characters they share), can still beat the best.
    """
    options = set(candidates)
    if len(options) > _MOST_CANDIDATES or len(name) > _LONGEST:
        return ""
    matcher = difflib.SequenceMatcher()
    matcher.set_seq2(name)
    best: tuple[float, str] | None = None
    compared = 0
    for bound, option in sorted(((_length_bound(name, o), o) for o in options), reverse=True):
        least = best[0] if best is not None else _CUTOFF
        if bound < least or compared == _MOST_COMPARED:
            break  # sorted by the bound: no later candidate can reach the best ratio
        matcher.set_seq1(option)
        if matcher.quick_ratio() >= least:
            compared += 1
            ratio = matcher.ratio()
            if ratio >= least and (best is None or (ratio, option) > best):
                best = (ratio, option)
    return f" (did you mean {best[1]!r}?)" if best is not None else ""


def _length_bound(name: str, option: str) -> float:
    """The highest ratio two strings of these lengths can have (``real_quick_ratio``)."""
    total = len(name) + len(option)
    return 2.0 * min(len(name), len(option)) / total if total else 1.0


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
