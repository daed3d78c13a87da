"""The gateway's API tokens in Postgres (``EventStore.tokens``).

Only a token's SHA-256 digest is stored (:func:`orbit_model.access.token_digest`);
the secret is drawn here and handed back once. Every request's token is looked
up by digest, so a revocation counts on every gateway at once; the last use is
written at most once per :data:`TOUCH_INTERVAL_SECONDS` per token and gateway.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from orbit_model.access import (
    MIN_SECRET_CHARS,
    TOKEN_PREFIX,
    Grant,
    TokenScope,
    check_token_name,
    token_digest,
)
from orbit_model.errors import ErrorCode, OrbitError
from orbit_services.store import sql
from orbit_services.store.console_sessions import ConsoleSessions
from orbit_services.store.pool import Database

TOUCH_INTERVAL_SECONDS = 60.0
SECRET_BYTES = 32
_KNOWN_SCOPES = frozenset(scope.value for scope in TokenScope)
SECRET_TEXT = re.compile(rf"[A-Za-z0-9_~+/=-]{{{MIN_SECRET_CHARS},512}}")
"""What a secret made elsewhere may be: the alphabets of base64 and of URL-safe tokens."""


def new_secret() -> str:
    """A fresh token: the prefix and 256 random bits, URL-safe."""
    return TOKEN_PREFIX + secrets.token_urlsafe(SECRET_BYTES)


@dataclass(frozen=True)
class TokenRow:
    """A token as listings show it: everything but its secret."""

    name: str
    scopes: tuple[str, ...]
    workflows: tuple[str, ...]
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None

    def to_json(self) -> dict[str, Any]:
        def iso(value: datetime | None) -> str | None:
            return None if value is None else value.isoformat()

        return {
            "name": self.name,
            "scopes": list(self.scopes),
            "workflows": list(self.workflows),
            "created_at": self.created_at.isoformat(),
            "expires_at": iso(self.expires_at),
            "revoked_at": iso(self.revoked_at),
            "last_used_at": iso(self.last_used_at),
        }


def _row(record: asyncpg.Record) -> TokenRow:
    return TokenRow(
        name=record["name"],
        scopes=tuple(record["scopes"]),
        workflows=tuple(record["workflows"]),
        created_at=record["created_at"],
        expires_at=record["expires_at"],
        revoked_at=record["revoked_at"],
        last_used_at=record["last_used_at"],
    )


class TokenStore:
    """Create, list, revoke and look up API tokens."""

    def __init__(self, database: Database) -> None:
        self._db = database
        self._touched: dict[str, float] = {}
        """Token name → when this process last wrote its ``last_used_at`` (monotonic)."""
        self.console_sessions = ConsoleSessions(database, self.touch)
        """The console's sign-in sessions, which end with their token."""

    async def create(
        self,
        name: str,
        scopes: frozenset[TokenScope],
        workflows: tuple[str, ...] = (),
        expires_at: datetime | None = None,
        secret: str | None = None,
    ) -> tuple[TokenRow, str]:
        """Store a new token; it and its secret (the only time the secret is seen).

        Args:
            secret: A secret made elsewhere (a secrets manager's); drawn here if None.
                Made again with the same name, secret, scopes and workflows, the token
                is answered as it is (so a deployment's init step may run twice).

        Raises:
            OrbitError: ``TOKEN_EXISTS`` when ``name`` is taken (revoked tokens keep
                their names), ``INVALID_REQUEST`` for a bad name or a short secret.
        """
        check_token_name(name)
        if TokenScope.ADMIN in scopes and workflows:
            # An admin makes tokens: narrowed, it could make itself one that is not.
            raise OrbitError(
                ErrorCode.INVALID_REQUEST, "an admin token cannot be narrowed to workflows"
            )
        given = secret is not None
        if secret is None:
            secret = new_secret()
        elif not SECRET_TEXT.fullmatch(secret):
            # ASCII: a header is read as latin-1, so other text would never match its
            # digest; no dot: a token with two would be taken for a JWT.
            raise OrbitError(
                ErrorCode.INVALID_REQUEST,
                f"a token must be at least {MIN_SECRET_CHARS} of A-Z a-z 0-9 - _ ~ + / =",
            )
        record = await self._db.fetchrow(
            sql.tokens.INSERT_TOKEN,
            name=name,
            digest=token_digest(secret),
            scopes=sorted(scope.value for scope in scopes),
            workflows=sorted(set(workflows)),
            expires_at=expires_at,
        )
        if record is None:
            # Made again from the same given secret and grant (a deployment's init
            # step run twice): the token is there as asked, which is not a conflict.
            same = Grant(name, frozenset(scopes), tuple(sorted(set(workflows))))
            if given and await self._grant(secret) == same:
                existing = [row for row in await self.list() if row.name == name]
                return existing[0], secret
            raise OrbitError(
                ErrorCode.TOKEN_EXISTS, f"a token named {name!r}, or of that secret, exists already"
            )
        return _row(record), secret

    async def list(self) -> list[TokenRow]:
        """Every token, revoked and expired ones included, oldest first."""
        return [_row(record) for record in await self._db.fetch(sql.tokens.LIST_TOKENS)]

    async def revoke(self, name: str) -> TokenRow:
        """Revoke the token ``name`` (again: no change); it as it is now.

        Raises:
            OrbitError: ``NOT_FOUND`` when no token has that name.
        """
        record = await self._db.fetchrow(sql.tokens.REVOKE_TOKEN, name=name)
        if record is None:
            raise OrbitError(ErrorCode.NOT_FOUND, f"no token is named {name!r}")
        return _row(record)

    async def grant(self, token: str) -> Grant | None:
        """What ``token`` may do; None when it is unknown, expired or revoked.

        Every call costs one lookup by digest, whatever ``token`` is (empty
        included): the answer for a missing token must not come sooner than the
        answer for a wrong one.
        """
        grant = await self._grant(token)
        if grant is not None:
            await self.touch(grant.name)
        return grant

    async def _grant(self, token: str) -> Grant | None:
        record = await self._db.fetchrow(sql.tokens.TOKEN_GRANT, digest=token_digest(token))
        if record is None:
            return None
        # A scope this version does not know (written by a newer one) grants nothing.
        scopes = frozenset(
            TokenScope(scope) for scope in record["scopes"] if scope in _KNOWN_SCOPES
        )
        return Grant(record["name"], scopes, tuple(record["workflows"]))

    async def usable(self) -> int:
        """How many tokens are neither revoked nor expired."""
        return int(await self._db.fetchval(sql.tokens.COUNT_USABLE_TOKENS))

    async def touch(self, name: str) -> None:
        """Note that the token ``name`` was used: written at most once a
        :data:`TOUCH_INTERVAL_SECONDS` per token and process."""
        now = time.monotonic()
        last = self._touched.get(name)
        if last is not None and now - last < TOUCH_INTERVAL_SECONDS:
            return
        self._touched[name] = now
        await self._db.execute(sql.tokens.TOUCH_TOKEN, name=name)
