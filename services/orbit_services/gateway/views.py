"""Executions as listings show them, and the cursors of a listing.

What each step waits for is the pure core's (:mod:`orbit_model.views`).
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Any

from orbit_model.errors import ErrorCode, OrbitError
from orbit_services.store import ExecutionRow

Json = Any


def encode_cursor(position: int) -> str:
    """The opaque cursor of a listing position."""
    return base64.urlsafe_b64encode(f"p{position}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    """The position a cursor of :func:`encode_cursor` names.

    Raises:
        OrbitError: ``INVALID_REQUEST`` for anything else.
    """
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        if text.startswith("p"):
            return int(text[1:])
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise OrbitError(ErrorCode.INVALID_REQUEST, f"{cursor!r} is not a cursor of this listing")


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def summary(row: ExecutionRow) -> dict[str, Json]:
    """An execution as listings show it."""
    return {
        "execution_id": row.execution_id,
        "workflow": row.workflow,
        "version": row.version,
        "status": row.status,
        "parent": row.parent,
        "created_at": row.created_at.isoformat(),
        "closed_at": _iso(row.closed_at),
    }
