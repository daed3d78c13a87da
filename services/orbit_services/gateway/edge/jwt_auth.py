"""JWTs of a team's identity provider, accepted beside Orbit's own API tokens.

With ``ORBIT_AUTH_JWKS_URL`` set, a bearer token shaped as a JWT (three dotted
parts, not ``orbit_…``) is checked here: signed by a key of that JWKS with an
asymmetric algorithm, not expired, for ``ORBIT_AUTH_JWT_AUDIENCE`` (and
``ORBIT_AUTH_JWT_ISSUER`` when set). Its scopes come from the claim
``ORBIT_AUTH_JWT_SCOPES_CLAIM`` (a space-separated string or a list; names
Orbit does not know grant nothing), and the workflow patterns that narrow it
from ``ORBIT_AUTH_JWT_WORKFLOWS_CLAIM`` when that is set.

The keys are fetched with PyJWT's client and kept: fetched again every
:data:`KEYS_LIFESPAN_SECONDS`, and for a key id not seen before at most once
per :data:`UNKNOWN_KEY_REFETCH_SECONDS`, so tokens with made-up key ids cannot
turn the gateway into a flood of requests to the identity provider.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import jwt

from orbit_model.access import Grant, TokenScope, parse_patterns
from orbit_model.errors import ErrorCode, OrbitError

KEYS_LIFESPAN_SECONDS = 300.0
UNKNOWN_KEY_REFETCH_SECONDS = 30.0
FETCH_TIMEOUT_SECONDS = 5
FAILED_FETCH_PAUSE_SECONDS = 5.0
"""While no key is held and a fetch failed, requests are answered 503 this long before
another fetch is tried: an unanswering provider must not queue up every request."""
ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"]
"""Asymmetric only: a JWKS holds public keys, and HS256 "signed" with one of them is a forgery."""
_KNOWN_SCOPES = {scope.value: scope for scope in TokenScope}
log = logging.getLogger("orbit.gateway")


def looks_like_jwt(token: str) -> bool:
    """Whether a bearer token is to be checked as a JWT rather than looked up (an API
    token never holds a dot: ``--secret-env`` refuses one)."""
    return token.count(".") == 2 and not token.startswith("orbit_")


class JwtVerifier:
    """Checks JWTs against one JWKS and turns their claims into a :class:`Grant`."""

    def __init__(
        self,
        jwks_url: str,
        audience: str,
        issuer: str | None = None,
        scopes_claim: str = "scope",
        workflows_claim: str | None = None,
    ) -> None:
        self._client = jwt.PyJWKClient(jwks_url, cache_jwk_set=False, timeout=FETCH_TIMEOUT_SECONDS)
        self._url = jwks_url
        self.audience = audience
        self.issuer = issuer
        self.scopes_claim = scopes_claim
        self.workflows_claim = workflows_claim
        self._keys: dict[str | None, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        """When the keys held were fetched (monotonic)."""
        self._tried_at: float | None = None
        """When a fetch was last tried, whatever came of it."""
        self._fetching = asyncio.Lock()

    async def grant(self, token: str) -> Grant | None:
        """What the JWT may do; None when it is not one this gateway accepts.

        Raises:
            OrbitError: ``UNAVAILABLE`` when the JWKS cannot be fetched.
        """
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return None
        kid = header.get("kid")
        key = await self._key(kid if isinstance(kid, str) else None)
        if key is None:
            return None
        try:
            # The PyJWK itself, not its raw key: PyJWT then verifies with the key's own
            # algorithm, whatever the token's header claims (no algorithm confusion).
            claims = jwt.decode(
                token,
                key,
                algorithms=ALGORITHMS,
                audience=self.audience,
                issuer=self.issuer,
                options={"require": ["exp", "sub", *(["iss"] if self.issuer else [])]},
            )
        except (jwt.PyJWTError, TypeError, ValueError):
            return None
        return self._grant_of(claims)

    def _grant_of(self, claims: dict[str, Any]) -> Grant | None:
        raw = claims.get(self.scopes_claim, [])
        names = raw.split() if isinstance(raw, str) else raw
        if not isinstance(names, list):
            return None
        scopes = frozenset(
            _KNOWN_SCOPES[name] for name in names if isinstance(name, str) and name in _KNOWN_SCOPES
        )
        workflows: tuple[str, ...] = ()
        if self.workflows_claim is not None:
            patterns = claims.get(self.workflows_claim)
            if patterns is None:
                # Fail closed: with the claim configured, only an admin goes without it.
                return Grant(f"jwt:{claims['sub']}", scopes) if TokenScope.ADMIN in scopes else None
            if not isinstance(patterns, list) or not patterns:
                return None
            try:
                workflows = parse_patterns(str(pattern) for pattern in patterns)
            except OrbitError:
                return None
            if TokenScope.ADMIN in scopes:  # as for API tokens: an admin is never narrowed
                return None
        return Grant(f"jwt:{claims['sub']}", scopes, workflows)

    async def _key(self, key_id: str | None) -> jwt.PyJWK | None:
        now = time.monotonic()
        stale = self._fetched_at is None or now - self._fetched_at > KEYS_LIFESPAN_SECONDS
        unknown = key_id not in self._keys and (
            self._fetched_at is None or now - self._fetched_at > UNKNOWN_KEY_REFETCH_SECONDS
        )
        if stale or unknown:
            async with self._fetching:  # one fetch at a time; those waiting reuse it
                tried = self._tried_at
                if tried is None or time.monotonic() - tried > 1.0:
                    await self._refresh()
                elif not self._keys:  # the fetch just failed: do not queue up another
                    raise _unavailable()
        if key_id is None and len(self._keys) == 1:  # a JWKS of one key need not name it
            return next(iter(self._keys.values()))
        return self._keys.get(key_id)

    async def _refresh(self) -> None:
        """Fetch the keys; when that fails, go on with those held (tried again in
        :data:`UNKNOWN_KEY_REFETCH_SECONDS`), or answer 503 when none are held (tried
        again after :data:`FAILED_FETCH_PAUSE_SECONDS`)."""
        self._tried_at = time.monotonic()
        try:
            jwk_set = await asyncio.to_thread(self._client.get_jwk_set, True)
            keys = {key.key_id: key for key in jwk_set.keys}
        except Exception as error:  # any failure of the provider: none may become a 500
            log.warning(
                "the JWKS at %s cannot be read: %s",
                self._url,
                error,
                extra={"action": "gateway.jwks_unreadable"},
            )
            if not self._keys:
                self._tried_at = time.monotonic() + FAILED_FETCH_PAUSE_SECONDS - 1.0
                raise _unavailable() from None
            retry_at = time.monotonic() - KEYS_LIFESPAN_SECONDS + UNKNOWN_KEY_REFETCH_SECONDS
            self._fetched_at = retry_at
            return
        self._keys = keys
        self._fetched_at = time.monotonic()


def _unavailable() -> OrbitError:
    # The provider's address is for the operator's log, not for a caller without a token.
    return OrbitError(ErrorCode.UNAVAILABLE, "the identity provider's keys cannot be read")
