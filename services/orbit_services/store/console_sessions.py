"""The console's sign-in sessions (``EventStore.tokens.console_sessions``).

A person signs in to the console with an API token, or an identity provider's
JWT, and gets a session: a random id that the browser's cookie holds, of which
only the SHA-256 digest is stored, with the grant and when the session ends.
Each console request looks its session up by digest (one indexed read, as a
token's), joined to its API token, so that revoking the token, or its expiry,
ends the session as it ends the token. Signing out deletes it, and a copied
cookie stops working with it. Postgres's clock decides expiry, as for tokens.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from datetime import datetime

from orbit_model.access import Grant, TokenScope, token_digest
from orbit_services.store import sql
from orbit_services.store.pool import Database

SESSION_BYTES = 32
_KNOWN_SCOPES = frozenset(scope.value for scope in TokenScope)


class ConsoleSessions:
    """Open, look up and end console sessions.

    Args:
        touch: Notes that the API token of that name was used (throttled by its store).
    """

    def __init__(self, database: Database, touch: Callable[[str], Awaitable[None]]) -> None:
        self._db = database
        self._touch = touch

    async def open(
        self, grant: Grant, *, api_token: bool, seconds: float, until: datetime | None = None
    ) -> str:
        """A new session of ``grant``: its id, to be given to the browser only.

        Args:
            api_token: Whether ``grant`` is the API token named ``grant.name``; its
                session then ends when the token is revoked or expires.
            seconds: How long the session lasts at most.
            until: When it ends at the latest (a JWT's ``exp``).
        """
        session_id = secrets.token_urlsafe(SESSION_BYTES)
        await self._db.execute(
            sql.console_sessions.OPEN,
            digest=token_digest(session_id),
            token_name=grant.name if api_token else None,
            name=grant.name,
            scopes=sorted(scope.value for scope in grant.scopes),
            workflows=list(grant.workflows),
            seconds=float(seconds),
            until=until,
        )
        return session_id

    async def grant(self, session_id: str) -> Grant | None:
        """What the session ``session_id`` may do; None when it is unknown, has ended or
        its token was revoked or expired. One lookup by digest, whatever the id."""
        record = await self._db.fetchrow(
            sql.console_sessions.GRANT, digest=token_digest(session_id)
        )
        if record is None:
            return None
        if record["token_name"] is not None:
            await self._touch(record["token_name"])
        scopes = frozenset(
            TokenScope(scope) for scope in record["scopes"] if scope in _KNOWN_SCOPES
        )
        return Grant(record["name"], scopes, tuple(record["workflows"]))

    async def end(self, session_id: str) -> None:
        """End the session ``session_id`` (signing out); an unknown one is no error."""
        await self._db.execute(sql.console_sessions.END, digest=token_digest(session_id))
