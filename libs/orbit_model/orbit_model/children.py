"""Child workflows: the id a parent's unit gives its child.

The id is derived from the parent's id and unit (``order-7:invoice``), so a
retried start of the same unit finds the child it started before.
"""

from __future__ import annotations

import hashlib
import re

_UNSAFE_ID_CHARACTERS = re.compile(r"[^A-Za-z0-9\-_.:]")


def child_execution_id(parent_id: str, unit: str) -> str:
    """The id of the child a parent's unit starts: the same for every attempt of that unit."""
    candidate = _UNSAFE_ID_CHARACTERS.sub(".", f"{parent_id}:{unit}").rstrip(".")
    if len(candidate) <= 200:
        return candidate
    digest = hashlib.sha256(f"{parent_id}\0{unit}".encode()).hexdigest()[:40]
    return f"{candidate[:150]}:{digest}"
