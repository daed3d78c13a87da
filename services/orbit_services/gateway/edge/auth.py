"""Who is asking: every request but the probes and the API's description carries an API
token (``Authorization: Bearer …``), and each route names the scope it needs.

:class:`Authenticate` (ASGI middleware) looks the token up before anything
else reads the request, so an unauthenticated caller gets no further than
``/openapi.json`` tells anyone: 401 ``UNAUTHENTICATED`` whether the token is
missing, unknown, expired or revoked, after the same one lookup by digest, on
every path, known or not. A route then takes its grant through
:func:`permit`, which answers 403 ``PERMISSION_DENIED`` for a missing scope;
what a token narrowed to some workflows may see is checked where the
workflow is known (:mod:`orbit_services.gateway.api.routes`).

With ``ORBIT_AUTH=disabled`` every request gets :data:`~orbit_model.access.UNRESTRICTED`.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import Depends, Request
from starlette.types import ASGIApp, Receive, Send
from starlette.types import Scope as AsgiScope

from orbit_model.access import UNRESTRICTED, Grant, TokenScope, bearer_token
from orbit_model.errors import ErrorCode, OrbitError
from orbit_sdk.logs import LogThrottle
from orbit_services.gateway.edge.console_session import is_console, is_open, session_id, to_login
from orbit_services.gateway.edge.jwt_auth import JwtVerifier, looks_like_jwt
from orbit_services.gateway.errors import error_response
from orbit_services.store.tokens import TokenStore

log = logging.getLogger("orbit.gateway")
_outages = LogThrottle(log)

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json", "/docs", "/redoc"})
"""Served without a token: the probes, and the API's description (it holds no data)."""
AUTH_DISABLED_WARNING = (
    "authentication is disabled (ORBIT_AUTH=disabled): anyone who reaches this gateway"
    " may do everything"
)
_UNAUTHENTICATED = (
    "this request needs a valid API token: send Authorization: Bearer TOKEN"
    " (orbit token create makes one)"
)


class Authenticate:
    """The ASGI middleware that puts each request's :class:`Grant` in its state.

    Args:
        app: The application behind it.
        tokens: Where tokens are looked up; None: authentication is disabled.
        open_paths: Paths served without a token.
        jwts: Checks bearer tokens shaped as JWTs, when an identity provider is set.
    """

    def __init__(
        self,
        app: ASGIApp,
        tokens: TokenStore | None,
        open_paths: frozenset[str] = OPEN_PATHS,
        jwts: JwtVerifier | None = None,
    ) -> None:
        self.app = app
        self.tokens = tokens
        self.open_paths = open_paths
        self.jwts = jwts

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" and self.tokens is not None:
            # No route takes one today; should one come, it is not to pass unchecked.
            await send({"type": "websocket.close", "code": 1008})
            return
        path = scope["path"]
        if scope["type"] != "http" or path in self.open_paths:
            await self.app(scope, receive, send)
            return
        console = is_console(path)
        if console and is_open(path):
            await self.app(scope, receive, send)
            return
        if self.tokens is None:
            grant: Grant | None = UNRESTRICTED
        else:
            try:
                grant = await self._grant(scope, console)
            except Exception as error:  # outside FastAPI's handlers: answered here
                await _refusal(error)(scope, receive, send)
                return
        if grant is None:
            response = (
                to_login(scope)
                if console
                else error_response(ErrorCode.UNAUTHENTICATED, _UNAUTHENTICATED)
            )
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["grant"] = grant
        await self.app(scope, receive, send)

    async def _grant(self, scope: AsgiScope, console: bool) -> Grant | None:
        assert self.tokens is not None
        if console:  # the console's pages: its session, named by its cookie only
            return await self.tokens.console_sessions.grant(session_id(scope) or "")
        header = dict(scope["headers"]).get(b"authorization")
        token = bearer_token(header.decode("latin-1") if header is not None else None)
        return await check_token(self.tokens, self.jwts, token)


async def check_token(tokens: TokenStore, jwts: JwtVerifier | None, token: str) -> Grant | None:
    """What ``token`` may do: a JWT checked against the identity provider, when one is
    set and the token is shaped as one, an API token otherwise; None when it is not valid."""
    if jwts is not None and looks_like_jwt(token):
        return await jwts.grant(token)
    return await tokens.grant(token)


def _refusal(error: Exception) -> Any:
    """The answer to a failure while a token was checked: a 503 when Postgres or the
    identity provider is away (logged once a while), a logged 500 otherwise, whose
    message says nothing of the cause."""
    if isinstance(error, OrbitError) and error.code is ErrorCode.UNAVAILABLE:
        _outages.log(
            logging.WARNING,
            error.message.split(":", 1)[0],
            "checking an API token: %s",
            error.message,
            extra={"action": "gateway.unavailable"},
        )
        return error_response(ErrorCode.UNAVAILABLE, error.message)
    log.error(
        "checking an API token failed",
        exc_info=error,
        extra={"action": "gateway.auth_failed"},
    )
    return error_response(ErrorCode.INTERNAL, "the request failed inside Orbit (see its log)")


# The dependencies are coroutines only so that FastAPI runs them on the event loop:
# a plain function would be sent to a thread pool, a hop per request for nothing.
async def grant_of(request: Request) -> Grant:
    """The request's grant, as :class:`Authenticate` left it."""
    grant = request.scope.get("state", {}).get("grant")
    if not isinstance(grant, Grant):  # pragma: no cover - every API route is behind the guard
        raise OrbitError(ErrorCode.INTERNAL, "the request passed no authentication")
    return grant


def permit(scope: TokenScope) -> Any:
    """A route's dependency: its grant, if it holds ``scope`` (403 otherwise)."""

    async def dependency(request: Request) -> Grant:
        grant = await grant_of(request)
        grant.require(scope)
        return grant

    return Depends(dependency)


# Route parameters that are the request's grant, once it holds the scope.
DefinitionsWrite = Annotated[Grant, permit(TokenScope.DEFINITIONS_WRITE)]
ExecutionsStart = Annotated[Grant, permit(TokenScope.EXECUTIONS_START)]
ExecutionsRead = Annotated[Grant, permit(TokenScope.EXECUTIONS_READ)]
ExecutionsSignal = Annotated[Grant, permit(TokenScope.EXECUTIONS_SIGNAL)]
ExecutionsCancel = Annotated[Grant, permit(TokenScope.EXECUTIONS_CANCEL)]
WorkersRead = Annotated[Grant, permit(TokenScope.WORKERS_READ)]
Admin = Annotated[Grant, permit(TokenScope.ADMIN)]
