"""Canonical JSON: one byte string per JSON value, whatever the key order."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """Sorted keys, no insignificant whitespace, UTF-8 text kept as is."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def sha256_of(text: str) -> str:
    """``sha256:`` and the hex SHA-256 of the UTF-8 bytes of ``text``."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
