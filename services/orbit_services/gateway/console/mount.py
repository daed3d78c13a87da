"""Serving the console from the gateway's application: its routes, static files and
error pages."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException
from starlette.responses import Response

from orbit_model.errors import ErrorCode, OrbitError
from orbit_services.gateway.api.executions import Executions
from orbit_services.gateway.console import paths
from orbit_services.gateway.console.actions import Verify, action_router
from orbit_services.gateway.console.catalog import catalog_router
from orbit_services.gateway.console.execution_page import execution_router
from orbit_services.gateway.console.headers import PageHeaders
from orbit_services.gateway.console.listing import listing_router
from orbit_services.gateway.console.render import HERE, error_page, refusal
from orbit_services.gateway.edge.console_session import is_console

Handler = Callable[[Request, Exception], Awaitable[Response]]


def mount_console(app: FastAPI, executions: Executions, verify: Verify | None) -> None:
    """Serve the console from ``app``; ``verify`` checks a login's token (None: auth off).

    Call after the API's error handlers are installed: the console's errors
    become pages, the API's stay JSON. Call after the other middleware is added: the
    pages' headers (:mod:`.headers`) go on every answer, a guard's refusal included.
    """
    app.add_middleware(PageHeaders)
    app.mount(paths.STATIC.rstrip("/"), StaticFiles(directory=HERE / "static"), "console-static")
    app.include_router(action_router(executions, verify))
    app.include_router(listing_router(executions))
    app.include_router(execution_router(executions))
    app.include_router(catalog_router(executions))

    @app.get(paths.ANY_PAGE, include_in_schema=False)
    async def unknown_page(rest: str) -> Response:
        raise OrbitError(ErrorCode.NOT_FOUND, f"the console has no page {paths.MOUNT}/{rest}")

    for kind in (OrbitError, HTTPException):
        app.exception_handlers[kind] = _as_page(app.exception_handlers[kind])


def _as_page(api_handler: Any) -> Handler:
    """``api_handler`` for the API; an error page for the console's paths."""

    async def handle(request: Request, error: Exception) -> Response:
        if not is_console(request.url.path):
            answer: Response = await api_handler(request, error)
            return answer
        if isinstance(error, HTTPException):
            code = ErrorCode.NOT_FOUND if error.status_code == 404 else ErrorCode.INVALID_REQUEST
            error = OrbitError(code, str(error.detail))
        assert isinstance(error, OrbitError)
        if request.method == "POST" and request.headers.get("hx-request"):
            return refusal(request, error)
        return error_page(request, error)

    return handle
