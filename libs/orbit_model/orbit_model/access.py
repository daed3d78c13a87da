"""Who may do what through the gateway: API token scopes, workflow patterns, grants.

An API token grants a set of :class:`TokenScope` values, optionally narrowed to
the workflows whose names match one of its patterns (``payments.*``). The
gateway looks a token up by its digest (only the digest is stored), turns the
row into a :class:`Grant`, and asks it whether a route's scope and the
workflow at hand are covered. Pure: drawing the secret is the caller's.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from orbit_model.durations import DurationError, parse_duration
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.names import WORKFLOW_NAME

TOKEN_PREFIX = "orbit_"
"""Every token starts so, which makes a leaked one easy to find in logs and repositories."""
TOKEN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}")
TOKEN_NAME_RULE = "letters, digits, - _ . @ (at most 100, starting with a letter or digit)"
WORKFLOW_PATTERN = re.compile(r"[a-z0-9_.*?-]{1,100}")
WORKFLOW_PATTERN_RULE = "a workflow name in which * matches any run of characters and ? one"
MAX_LIFETIME_MS = 3650 * 86_400_000
"""The longest ``--expires``: ten years (a token without one lives until revoked)."""
MIN_SECRET_CHARS = 32
"""The shortest token accepted from outside (``--secret-env``): about 190 bits or more."""


class TokenScope(StrEnum):
    """What a token may do; ``admin`` may do everything, tokens included."""

    DEFINITIONS_WRITE = "definitions:write"
    EXECUTIONS_START = "executions:start"
    EXECUTIONS_READ = "executions:read"
    EXECUTIONS_SIGNAL = "executions:signal"
    EXECUTIONS_CANCEL = "executions:cancel"
    WORKERS_READ = "workers:read"
    ADMIN = "admin"


SCOPES_RULE = ", ".join(scope.value for scope in TokenScope)


def parse_scopes(values: Iterable[str]) -> frozenset[TokenScope]:
    """The scopes named by ``values`` (commas allowed within one), at least one.

    Raises:
        OrbitError: ``INVALID_REQUEST`` naming an unknown scope, or none given.
    """
    scopes: set[TokenScope] = set()
    for value in values:
        for part in value.split(","):
            name = part.strip()
            if not name:
                continue
            try:
                scopes.add(TokenScope(name))
            except ValueError:
                raise OrbitError(
                    ErrorCode.INVALID_REQUEST,
                    f"unknown scope {name!r}; the scopes are {SCOPES_RULE}",
                ) from None
    if not scopes:
        raise OrbitError(ErrorCode.INVALID_REQUEST, f"name at least one scope: {SCOPES_RULE}")
    return frozenset(scopes)


def parse_patterns(values: Iterable[str]) -> tuple[str, ...]:
    """The workflow patterns named by ``values`` (commas allowed), sorted, no duplicates.

    Raises:
        OrbitError: ``INVALID_REQUEST`` naming a pattern that can match no workflow name.
    """
    patterns: set[str] = set()
    for value in values:
        for part in value.split(","):
            pattern = part.strip()
            if not pattern:
                continue
            if not WORKFLOW_PATTERN.fullmatch(pattern):
                raise OrbitError(
                    ErrorCode.INVALID_REQUEST,
                    f"{pattern!r} is not a workflow pattern: {WORKFLOW_PATTERN_RULE}",
                )
            patterns.add(pattern)
    return tuple(sorted(patterns))


def expiry(expires_in: str | None, now: datetime) -> datetime | None:
    """When a token made at ``now`` with lifetime ``expires_in`` (``30d``) expires; None
    for a token without one.

    Raises:
        OrbitError: ``INVALID_REQUEST`` for a lifetime that cannot be read.
    """
    if expires_in is None:
        return None
    try:
        milliseconds = parse_duration(expires_in)
    except DurationError as error:
        raise OrbitError(ErrorCode.INVALID_REQUEST, f"expires: {error}") from None
    if milliseconds > MAX_LIFETIME_MS:
        raise OrbitError(
            ErrorCode.INVALID_REQUEST, "expires: at most 3650d (ten years); or give none"
        )
    return now + timedelta(milliseconds=milliseconds)


def check_token_name(name: str) -> str:
    """``name`` if it may name a token.

    Raises:
        OrbitError: ``INVALID_REQUEST`` saying what a name may be.
    """
    if not TOKEN_NAME.fullmatch(name):
        raise OrbitError(
            ErrorCode.INVALID_REQUEST, f"{name!r} cannot name a token: {TOKEN_NAME_RULE}"
        )
    return name


def token_digest(token: str) -> bytes:
    """What is stored of a token, and what a presented one is looked up by.

    A plain SHA-256 suffices: tokens are drawn with 256 bits of entropy, so no
    dictionary or brute force reaches them, and a fast digest costs each request
    nothing. Text that is not a token still gets a digest (it then matches
    nothing), so every request costs the same lookup whatever it presents.
    """
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def bearer_token(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer …`` header; ``""`` when there is none."""
    if not authorization:
        return ""
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return ""
    return token.strip()


def matches(pattern: str, name: str) -> bool:
    """Whether ``name`` matches the workflow pattern (``*`` any run of characters, ``?``
    one), in time linear in their lengths.

    Not a regular expression: ``.*`` backtracks, and a pattern such as ``*.*.x``
    against a long name a client sends would hold the event loop for seconds.
    """
    p = n = 0
    star = -1  # where the last * was in the pattern
    resume = 0  # the name position that * matches up to, exclusive, so far
    while n < len(name):
        if p < len(pattern) and pattern[p] in ("?", name[n]):
            p, n = p + 1, n + 1
        elif p < len(pattern) and pattern[p] == "*":
            star, resume = p, n
            p += 1
        elif star >= 0:  # let the last * take one more character
            resume += 1
            p, n = star + 1, resume
        else:
            return False
    return all(char == "*" for char in pattern[p:])


def like_pattern(pattern: str) -> str:
    """A workflow pattern as a SQL ``LIKE`` pattern (with ``\\`` escaping ``_``)."""
    escaped = pattern.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped.replace("*", "%").replace("?", "_")


@dataclass(frozen=True)
class Grant:
    """What one token may do.

    Attributes:
        name: The token's name (for logs; never its secret).
        scopes: What it may do.
        workflows: The patterns of the workflows it may touch; empty: every workflow.
    """

    name: str
    scopes: frozenset[TokenScope]
    workflows: tuple[str, ...] = ()

    def allows(self, scope: TokenScope) -> bool:
        """Whether the token holds ``scope`` (``admin`` holds all)."""
        return TokenScope.ADMIN in self.scopes or scope in self.scopes

    def covers(self, workflow: str) -> bool:
        """Whether the token may touch executions and definitions of ``workflow``."""
        if not self.workflows:
            return True
        # A name no workflow can have matches no pattern (and is never worth matching).
        return WORKFLOW_NAME.fullmatch(workflow) is not None and any(
            matches(pattern, workflow) for pattern in self.workflows
        )

    @property
    def everything(self) -> bool:
        """Whether no pattern narrows the token."""
        return not self.workflows

    def require(self, scope: TokenScope, workflow: str | None = None) -> None:
        """Raise unless the token holds ``scope`` (for ``workflow``, when given).

        Raises:
            OrbitError: ``PERMISSION_DENIED`` naming what is missing.
        """
        if not self.allows(scope):
            raise OrbitError(
                ErrorCode.PERMISSION_DENIED, f"this token does not have the scope {scope.value}"
            )
        if workflow is not None and not self.covers(workflow):
            raise OrbitError(
                ErrorCode.PERMISSION_DENIED,
                f"this token may not touch workflow {workflow!r}"
                f" (it is limited to {', '.join(self.workflows)})",
            )


UNRESTRICTED = Grant("auth-disabled", frozenset({TokenScope.ADMIN}))
"""What every request may do while authentication is disabled (``ORBIT_AUTH=disabled``)."""
