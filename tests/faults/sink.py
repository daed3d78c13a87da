"""A side-effect sink outside Orbit: each run of a task appends a line to a file.

Orbit's own history says what the engine decided; the sink says what really
ran, in every process (the test's, and the worker processes it kills or
freezes). Each line is ``KEY TOKEN WHO``, appended in one write, so lines from
several processes never mix.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Run:
    key: str
    """The idempotency key of the unit it ran for."""
    token: str
    """The delivery it ran."""
    who: str
    """The worker that ran it."""


class Sink:
    def __init__(self, path: Path) -> None:
        self.path = path

    def record(self, key: str, token: str, who: str) -> None:
        line = f"{key} {token} {who}\n".encode()
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(descriptor, line)
        finally:
            os.close(descriptor)

    def runs(self) -> list[Run]:
        if not self.path.exists():
            return []
        lines = self.path.read_text(encoding="utf-8").splitlines()
        return [Run(*line.split(" ", 2)) for line in lines if line]

    def counts(self) -> Counter[str]:
        """Runs per idempotency key."""
        return Counter(run.key for run in self.runs())
