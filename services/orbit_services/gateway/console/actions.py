"""What the console's forms do: sign in and out, send a signal, cancel an execution.

Signing in opens a session
(:mod:`orbit_services.gateway.edge.console_session`) for the token, for at most
``ORBIT_CONSOLE_SESSION_SECONDS`` (and a JWT's for no longer than the JWT);
signing out ends it.

Every POST is a plain form (``application/x-www-form-urlencoded``) with its
CSRF token, checked before anything else
(:func:`~orbit_services.gateway.edge.console_session.forged`); the route then
requires the scope the API's route would, so a read-only token's forged POST
gets 403 whatever the page showed. Without JavaScript a form answers with a
redirect back to the page (``?done=…``); sent by htmx it answers with
the small result part the page swaps in, and the live part shows the rest.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode

import jwt
from fastapi import APIRouter, Request
from starlette.responses import RedirectResponse, Response

from orbit_model.access import Grant, TokenScope
from orbit_model.errors import ErrorCode, OrbitError
from orbit_services.gateway.api.executions import Executions
from orbit_services.gateway.console import paths
from orbit_services.gateway.console.execution_page import visible_row
from orbit_services.gateway.console.forms import payload_of
from orbit_services.gateway.console.notices import (
    CANCEL_REQUESTED,
    Controls,
    signal_notice,
    signal_query,
)
from orbit_services.gateway.console.render import render
from orbit_services.gateway.edge.auth import grant_of
from orbit_services.gateway.edge.console_session import (
    clear_session,
    forged,
    session_id,
    set_session,
)
from orbit_services.gateway.edge.jwt_auth import looks_like_jwt
from orbit_services.store.console_sessions import ConsoleSessions

Verify = Callable[[str], Awaitable[Grant | None]]
"""Checks a token as the API does: its grant, or None when it is not valid."""


async def read_form(request: Request) -> dict[str, str]:
    """The form's fields (the last of each name), refused as forged unless its CSRF token
    and origin are the console's own."""
    body = (await request.body()).decode("utf-8", "replace")
    form = dict(parse_qsl(body, keep_blank_values=True))
    problem = forged(request, form)
    if problem is not None:
        raise OrbitError(ErrorCode.PERMISSION_DENIED, problem)
    return form


def _safe_next(target: str | None) -> str:
    """Where to go after signing in: a console path only (never another site)."""
    if target and target.startswith(paths.MOUNT) and not target.startswith("//"):
        return target
    return paths.MOUNT


def _answer(
    request: Request,
    execution_id: str,
    query: dict[str, Any],
    message: str,
    controls: Controls = "open",
) -> Response:
    """The result part for htmx (with the actions, should none be left to send); the
    page again, with ``query`` to tell what was done, without JavaScript."""
    if request.headers.get("hx-request"):
        return render(request, "_action_result.html", message=message, ok=True, controls=controls)
    url = f"{paths.execution(execution_id)}?{urlencode(query, doseq=True)}"
    return RedirectResponse(url, 303)


def action_router(executions: Executions, verify: Verify | None) -> APIRouter:
    """The form routes; ``verify`` None: authentication is disabled."""
    router = APIRouter()
    sessions = executions.store.tokens.console_sessions
    _session_routes(router, verify, sessions, executions.settings.console_session_seconds)
    _execution_routes(router, executions)
    return router


def _jwt_expiry(token: str) -> datetime | None:
    """When a token that was just accepted ends, if it is a JWT (its ``exp``, which the
    check required); None for an API token, which the session's lookup checks itself."""
    if not looks_like_jwt(token):
        return None
    claims = jwt.decode(token, options={"verify_signature": False})  # verified already
    return datetime.fromtimestamp(int(claims["exp"]), UTC)


def _session_routes(
    router: APIRouter, verify: Verify | None, sessions: ConsoleSessions, seconds: float
) -> None:
    @router.get(paths.LOGIN, include_in_schema=False)
    async def login_page(request: Request, next: str | None = None) -> Response:
        if verify is None:
            return RedirectResponse(_safe_next(next), 303)
        return render(request, "login.html", next=_safe_next(next), problem=None)

    @router.post(paths.LOGIN, include_in_schema=False)
    async def login(request: Request) -> Response:
        form = await read_form(request)
        target = _safe_next(form.get("next"))
        if verify is None:
            return RedirectResponse(target, 303)
        token = form.get("token", "").strip()
        grant = await verify(token) if token else None
        if grant is None:
            problem = "That token is not valid: it is unknown, expired or revoked."
            return render(request, "login.html", status=401, next=target, problem=problem)
        until = _jwt_expiry(token)
        session = await sessions.open(grant, api_token=until is None, seconds=seconds, until=until)
        response = RedirectResponse(target, 303)
        set_session(response, request, session)
        return response

    @router.post(paths.LOGOUT, include_in_schema=False)
    async def logout(request: Request) -> Response:
        await read_form(request)
        session = session_id(request.scope)
        if verify is not None and session is not None:
            await sessions.end(session)
        response = RedirectResponse(paths.LOGIN, 303)
        clear_session(response)
        return response


def _execution_routes(router: APIRouter, executions: Executions) -> None:
    @router.post(paths.SIGNAL, include_in_schema=False)
    async def send_signal(execution_id: str, name: str, request: Request) -> Response:
        form = await read_form(request)
        grant = await grant_of(request)
        row = await visible_row(executions, grant, execution_id)
        grant.require(TokenScope.EXECUTIONS_SIGNAL, row.workflow)
        definition = await executions.registry.by_hash(row.definition_hash)
        if name not in definition.ir.signals:
            raise OrbitError(
                ErrorCode.INVALID_REQUEST, f"{row.workflow} declares no signal {name!r}"
            )
        payload = payload_of(definition.ir.signals[name], form)
        request_id = form.get("request_id") or None
        answer = await executions.signal(execution_id, name, payload, request_id)
        message = signal_notice(name, answer["taken"], answer["steps"])
        return _answer(request, execution_id, signal_query(name, answer), message)

    @router.post(paths.CANCEL, include_in_schema=False)
    async def cancel(execution_id: str, request: Request) -> Response:
        form = await read_form(request)
        grant = await grant_of(request)
        row = await visible_row(executions, grant, execution_id)
        grant.require(TokenScope.EXECUTIONS_CANCEL, row.workflow)
        view = await executions.cancel(execution_id, form.get("reason", "").strip())
        # It stops from now on: its forms go at once, not at the next refresh.
        controls: Controls = "stopping" if view.status == "running" else "closed"
        return _answer(request, execution_id, {"done": "cancel"}, CANCEL_REQUESTED, controls)
