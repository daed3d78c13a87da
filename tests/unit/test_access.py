"""orbit_model.access: scopes, workflow patterns, grants, lifetimes and bearer headers."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatchcase

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbit_model.access import (
    UNRESTRICTED,
    Grant,
    TokenScope,
    bearer_token,
    expiry,
    like_pattern,
    matches,
    parse_patterns,
    parse_scopes,
    token_digest,
)
from orbit_model.errors import OrbitError

NOW = datetime(2026, 12, 4, tzinfo=UTC)
names = st.text(alphabet="ab.-_", max_size=12)
patterns = st.text(alphabet="ab.-_*?", max_size=8)


@given(patterns, names)
def test_a_pattern_matches_as_fnmatch_would(pattern: str, name: str) -> None:
    assert matches(pattern, name) == fnmatchcase(name, pattern)


@given(patterns, names)
def test_a_pattern_matches_as_its_like_pattern_would_in_postgres(pattern: str, name: str) -> None:
    """The list query filters with LIKE; it must agree with the check done in Python."""
    like = like_pattern(pattern)
    regex, i = "", 0
    while i < len(like):  # LIKE's semantics with \\ as the escape
        char = like[i]
        if char == "\\":
            regex, i = regex + re.escape(like[i + 1]), i + 2
            continue
        regex += ".*" if char == "%" else "." if char == "_" else re.escape(char)
        i += 1
    assert (re.fullmatch(regex, name, re.S) is not None) == matches(pattern, name)


def test_matching_takes_linear_time_whatever_the_pattern() -> None:
    # CPU time, not wall time: a busy machine's other work is not counted. Linear is a
    # few tens of milliseconds; a backtracking matcher would take ages on these.
    started = time.process_time()
    assert not matches("*.*.*.*.approve", "." * 200_000)
    assert not matches("*a*a*a*a*a*b", "a" * 200_000)
    assert time.process_time() - started < 2.0


def test_a_grant_covers_only_names_a_workflow_can_have() -> None:
    grant = Grant("t", frozenset({TokenScope.EXECUTIONS_READ}), ("pay*",))
    assert grant.covers("payments")
    assert not grant.covers("refunds")
    assert not grant.covers("pay" + "x" * 200)  # longer than any workflow name
    assert not grant.covers("PAYMENTS")
    assert UNRESTRICTED.covers("anything at all")


def test_admin_holds_every_scope_and_require_names_what_is_missing() -> None:
    admin = Grant("a", frozenset({TokenScope.ADMIN}))
    assert all(admin.allows(scope) for scope in TokenScope)
    reader = Grant("r", frozenset({TokenScope.EXECUTIONS_READ}), ("mine-*",))
    reader.require(TokenScope.EXECUTIONS_READ, "mine-1")
    with pytest.raises(OrbitError, match="scope executions:start") as missing:
        reader.require(TokenScope.EXECUTIONS_START)
    assert missing.value.code == "PERMISSION_DENIED"
    with pytest.raises(OrbitError, match="limited to mine-"):
        reader.require(TokenScope.EXECUTIONS_READ, "theirs")


def test_scopes_and_patterns_are_read_with_commas_and_refused_when_unknown() -> None:
    assert parse_scopes(["admin", "executions:read, workers:read"]) == {
        TokenScope.ADMIN,
        TokenScope.EXECUTIONS_READ,
        TokenScope.WORKERS_READ,
    }
    for bad in (["root"], [], [" , "]):
        with pytest.raises(OrbitError) as refused:
            parse_scopes(bad)
        assert refused.value.code == "INVALID_REQUEST"
    assert parse_patterns(["b*,a?", "b*"]) == ("a?", "b*")
    for pattern in ("UPPER", "a b", "x" * 101, "a\x00"):
        with pytest.raises(OrbitError):
            parse_patterns([pattern])


def test_a_lifetime_is_a_duration_of_at_most_ten_years() -> None:
    assert expiry(None, NOW) is None
    assert expiry("30d", NOW) == NOW + timedelta(days=30)
    assert expiry("3650d", NOW) == NOW + timedelta(days=3650)
    for bad in ("soon", "0s", "-1d", "3651d", "99999999999d", "9" * 400 + "d"):
        with pytest.raises(OrbitError) as refused:
            expiry(bad, NOW)
        assert refused.value.code == "INVALID_REQUEST", bad


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (None, ""),
        ("", ""),
        ("Bearer abc", "abc"),
        ("bearer   abc  ", "abc"),
        ("Basic abc", ""),
        ("Bearer", ""),
    ],
)
def test_the_bearer_token_of_a_header(header: str | None, token: str) -> None:
    assert bearer_token(header) == token


@given(st.text(max_size=50))
def test_any_text_has_a_digest_surrogates_included(text: str) -> None:
    assert len(token_digest(text)) == 32
    assert len(token_digest(text + "\ud800")) == 32
