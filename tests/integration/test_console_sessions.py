"""The console's sign-in sessions in Postgres: a session holds its grant under the digest
of its id only; it ends when its person signs out, when its API token is revoked or
expires, when its time is up (and is then deleted at the next sign-in), and a JWT's at
the JWT's ``exp`` at the latest."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from orbit_model.access import Grant, TokenScope
from orbit_services.store import EventStore
from tests.database import Database

from .conftest import OrbitEnv

HOUR = 3600


@pytest.fixture
async def store(orbit_env: OrbitEnv) -> AsyncIterator[EventStore]:
    store = await EventStore.connect(orbit_env.settings.database_url)
    try:
        yield store
    finally:
        await store.close()


async def test_a_session_is_kept_by_digest_and_ends_with_its_token(
    store: EventStore, orbit_env: OrbitEnv
) -> None:
    sessions = store.tokens.console_sessions
    await store.tokens.create("ada", frozenset({TokenScope.EXECUTIONS_READ}), ("pay*",))
    grant = Grant("ada", frozenset({TokenScope.EXECUTIONS_READ}), ("pay*",))
    first = await sessions.open(grant, api_token=True, seconds=HOUR)
    second = await sessions.open(grant, api_token=True, seconds=HOUR)
    assert first != second
    assert await sessions.grant(first) == grant
    assert await sessions.grant("") is None
    assert await sessions.grant(first + "x") is None

    stored = await Database(orbit_env.settings.database_url).fetch(
        "SELECT digest, token_name, expires_at - created_at AS lasts FROM console_sessions"
    )
    assert sorted(bytes(r["digest"]) for r in stored) == sorted(
        hashlib.sha256(s.encode()).digest() for s in (first, second)
    )
    assert {(r["token_name"], r["lasts"]) for r in stored} == {("ada", timedelta(hours=1))}

    await sessions.end(first)  # signing out ends that session only
    assert await sessions.grant(first) is None
    assert await sessions.grant(second) == grant
    await store.tokens.revoke("ada")  # revoking the token ends every session of it
    assert await sessions.grant(second) is None


async def test_a_session_ends_when_its_time_is_up_and_is_then_deleted(
    store: EventStore, orbit_env: OrbitEnv
) -> None:
    sessions = store.tokens.console_sessions
    database = Database(orbit_env.settings.database_url)
    await store.tokens.create("bob", frozenset({TokenScope.WORKERS_READ}))
    grant = Grant("bob", frozenset({TokenScope.WORKERS_READ}))
    old = await sessions.open(grant, api_token=True, seconds=HOUR)
    # As if the hour had passed.
    await database.fetchval("UPDATE console_sessions SET expires_at = now() RETURNING 1")
    assert await sessions.grant(old) is None
    new = await sessions.open(grant, api_token=True, seconds=HOUR)
    assert await database.fetchval("SELECT count(*) FROM console_sessions") == 1
    assert await sessions.grant(new) == grant


async def test_a_jwts_session_ends_at_its_exp_at_the_latest(
    store: EventStore, orbit_env: OrbitEnv
) -> None:
    sessions = store.tokens.console_sessions
    grant = Grant("jwt:ada", frozenset({TokenScope.EXECUTIONS_READ}), ("pay*",))
    exp = (datetime.now(UTC) + timedelta(minutes=5)).replace(microsecond=0)
    session = await sessions.open(grant, api_token=False, seconds=HOUR, until=exp)
    assert await sessions.grant(session) == grant  # no API token to look up
    row = await Database(orbit_env.settings.database_url).fetchrow(
        "SELECT token_name, expires_at FROM console_sessions"
    )
    assert row is not None
    assert (row["token_name"], row["expires_at"]) == (None, exp)
