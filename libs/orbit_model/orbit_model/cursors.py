"""The cursors of a listing: opaque to clients, a position to the store."""

from __future__ import annotations

import base64
import binascii

from orbit_model.errors import ErrorCode, OrbitError


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
