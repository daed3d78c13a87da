"""A listing's cursors: every position comes back from its cursor, and anything else is refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbit_model.cursors import decode_cursor, encode_cursor
from orbit_model.errors import ErrorCode, OrbitError


@given(st.integers(min_value=0, max_value=2**63))
def test_a_position_comes_back_from_its_cursor(position: int) -> None:
    cursor = encode_cursor(position)
    assert decode_cursor(cursor) == position
    assert cursor.isascii()
    assert "=" not in cursor


@given(st.text(max_size=40))
def test_any_text_is_a_position_or_refused_with_a_code(text: str) -> None:
    code = None
    try:
        decode_cursor(text)
    except OrbitError as error:  # never another exception
        code = error.code
    assert code in (None, ErrorCode.INVALID_REQUEST)


@pytest.mark.parametrize("cursor", ["", "!!", "eDE", "cA"])
def test_what_no_listing_handed_out_is_refused(cursor: str) -> None:
    with pytest.raises(OrbitError) as raised:
        decode_cursor(cursor)
    assert raised.value.code is ErrorCode.INVALID_REQUEST
