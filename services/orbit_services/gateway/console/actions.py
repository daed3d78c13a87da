"""What the console's forms do: sign in and out, send a signal, cancel an execution.

Every POST is a plain form (``application/x-www-form-urlencoded``) with its
CSRF token, checked before anything else (:func:`.session.forged`); the route
then requires the scope the API's route would, so a read-only token's forged
POST gets 403 whatever the page showed. Without JavaScript a form answers
with a redirect back to the page (``?done=…``); sent by htmx it answers with
the small result part the page swaps in, and the live part shows the rest.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import parse_qsl

from fastapi import APIRouter, Request
from starlette.responses import RedirectResponse, Response

from orbit_model.access import Grant, Scope
from orbit_model.errors import ErrorCode, OrbitError
from orbit_services.gateway.auth import grant_of
from orbit_services.gateway.console.execution_page import visible_row
from orbit_services.gateway.console.forms import payload_of
from orbit_services.gateway.console.render import render
from orbit_services.gateway.console.session import (
    clear_session,
    forged,
    set_session,
)
from orbit_services.gateway.executions import Executions

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
    if target and target.startswith("/ui") and not target.startswith("//"):
        return target
    return "/ui"


def _answer(request: Request, execution_id: str, done: str, message: str) -> Response:
    if request.headers.get("hx-request"):
        return render(request, "_action_result.html", message=message, ok=True)
    return RedirectResponse(f"/ui/executions/{execution_id}?done={done}", 303)


def action_router(executions: Executions, verify: Verify | None) -> APIRouter:
    """The form routes; ``verify`` None: authentication is disabled."""
    router = APIRouter()

    @router.get("/ui/login", include_in_schema=False)
    async def login_page(request: Request, next: str | None = None) -> Response:
        if verify is None:
            return RedirectResponse(_safe_next(next), 303)
        return render(request, "login.html", next=_safe_next(next), problem=None)

    @router.post("/ui/login", include_in_schema=False)
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
        response = RedirectResponse(target, 303)
        set_session(response, request, token)
        return response

    @router.post("/ui/logout", include_in_schema=False)
    async def logout(request: Request) -> Response:
        await read_form(request)
        response = RedirectResponse("/ui/login", 303)
        clear_session(response)
        return response

    @router.post("/ui/executions/{execution_id}/signals/{name}", include_in_schema=False)
    async def send_signal(execution_id: str, name: str, request: Request) -> Response:
        form = await read_form(request)
        grant = await grant_of(request)
        row = await visible_row(executions, grant, execution_id)
        grant.require(Scope.EXECUTIONS_SIGNAL, row.workflow)
        definition = await executions.registry.by_hash(row.definition_hash)
        if name not in definition.ir.signals:
            raise OrbitError(
                ErrorCode.INVALID_REQUEST, f"{row.workflow} declares no signal {name!r}"
            )
        payload = payload_of(definition.ir.signals[name], form)
        await executions.signal(execution_id, name, payload, form.get("request_id") or None)
        return _answer(request, execution_id, "signal", f"Signal {name} sent.")

    @router.post("/ui/executions/{execution_id}/cancel", include_in_schema=False)
    async def cancel(execution_id: str, request: Request) -> Response:
        form = await read_form(request)
        grant = await grant_of(request)
        row = await visible_row(executions, grant, execution_id)
        grant.require(Scope.EXECUTIONS_CANCEL, row.workflow)
        await executions.cancel(execution_id, form.get("reason", "").strip())
        return _answer(request, execution_id, "cancel", "Cancellation requested.")

    return router
