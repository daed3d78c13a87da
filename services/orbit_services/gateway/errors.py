"""Every error the HTTP API answers is ``{"error": {"code", "message"}}``.

An :class:`OrbitError` carries its own status. FastAPI's request validation
becomes ``INVALID_REQUEST`` (400), an unknown path ``NOT_FOUND``, and anything
unexpected ``INTERNAL`` (500): logged with its traceback, which never reaches
the client.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.problems import DefinitionError
from orbit_sdk.logs import LogThrottle

log = logging.getLogger("orbit.gateway")

_SHOWN_PROBLEMS = 5
RETRY_AFTER_SECONDS = 2
"""What a 503 tells a client to wait before trying again (``Retry-After``)."""
_INTERNAL_MESSAGE = "the gateway failed unexpectedly; the error is in its log"


def error_response(
    code: ErrorCode, message: str, status: int | None = None, details: Any = None
) -> JSONResponse:
    """The error body, with the code's HTTP status unless ``status`` says otherwise."""
    return _error_body(code, message, status or code.http_status, details)


def _error_body(code: str, message: str, status: int, details: Any = None) -> JSONResponse:
    error: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        error["details"] = details
    # 503: what the gateway needs is away; a client may try again shortly.
    headers = {"Retry-After": str(RETRY_AFTER_SECONDS)} if status == 503 else None
    if status == 401:  # RFC 9110: a 401 names the scheme the client must use
        headers = {"WWW-Authenticate": 'Bearer realm="orbit"'}
    return JSONResponse({"error": error}, status_code=status, headers=headers)


def _orbit_error_handler(
    outages: LogThrottle,
) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    """The handler of every OrbitError; ``outages`` keeps a 503's log line to one a while."""

    async def answer(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, OrbitError)  # registered for OrbitError only
        if error.code is ErrorCode.UNAVAILABLE:
            # Postgres or RabbitMQ away: every request says so; the log says it once a while.
            cause = error.message.split(":", 1)[0]
            outages.log(
                logging.WARNING,
                cause,
                "answering 503: %s",
                error.message,
                extra={"action": "http.unavailable"},
            )
        if error.code is ErrorCode.INTERNAL:
            # A bug, or Postgres refusing what it should not: logged with its cause,
            # and the client told no more than that (the cause may hold internals).
            log.error(
                "unexpected error answering %s %s: %s",
                request.method,
                request.url.path,
                error.message,
                exc_info=error,
                extra={"action": "http.internal_error"},
            )
            return error_response(ErrorCode.INTERNAL, _INTERNAL_MESSAGE)
        details = None
        if isinstance(error, DefinitionError):
            details = [
                {"line": p.line, "path": p.path, "message": p.message} for p in error.problems
            ]
        return _error_body(error.code, error.message, error.http_status, details)

    return answer


async def _invalid_request(_: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    return error_response(ErrorCode.INVALID_REQUEST, describe_validation(error.errors()))


async def _http_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, HTTPException)
    if error.status_code == 404:
        message = f"no such resource: {request.method} {request.url.path}"
        return error_response(ErrorCode.NOT_FOUND, message, 404)
    # 405 and friends keep their status: the request, not Orbit, is wrong; and their
    # headers. A 405 lists the methods the path takes in `Allow` (RFC 9110).
    response = error_response(ErrorCode.INVALID_REQUEST, str(error.detail), error.status_code)
    response.headers.update(error.headers or {})
    if error.status_code == 405:
        response.headers["Allow"] = _allowed_methods(request)
    return response


def _allowed_methods(request: Request) -> str:
    """The methods of every route of the request's path, for ``Allow``: Starlette names
    only those of the first route it finds, and ``/v1/executions`` has one for GET and
    another for POST."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        if isinstance(route, Route) and route.matches(request.scope)[0] is not Match.NONE:
            methods |= route.methods or set()
    return ", ".join(sorted(methods))


def describe_validation(errors: Sequence[Any]) -> str:
    """One line per problem of a request, ``where: what`` (the first few)."""
    lines = []
    for item in errors[:_SHOWN_PROBLEMS]:
        location = [str(part) for part in item.get("loc", ())]
        if item.get("type") == "json_invalid":
            reason = item.get("ctx", {}).get("error", "malformed")
            return f"the body is not valid JSON: {reason}"
        if location == ["body"] and isinstance(item.get("input"), bytes | bytearray):
            return "the body must be JSON, sent with content-type application/json"
        lines.append(f"{'.'.join(location)}: {item.get('msg', 'invalid')}")
    more = len(errors) - _SHOWN_PROBLEMS
    if more > 0:
        lines.append(f"and {more} more")
    return "; ".join(lines)


class CatchAll:
    """Answers an exception no handler took with a 500 ``INTERNAL`` error, and logs it.

    Starlette's own last-resort handler answers too, but then re-raises, so
    the server would log the error twice and a test client would see it raised.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:
            log.exception(
                "unexpected error answering %s %s",
                scope.get("method"),
                scope.get("path"),
                extra={"action": "http.internal_error"},
            )
            if started:
                return  # half an answer is out: the server closes the connection
            response = error_response(ErrorCode.INTERNAL, _INTERNAL_MESSAGE)
            await response(scope, receive, send)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(OrbitError, _orbit_error_handler(LogThrottle(log)))
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_middleware(CatchAll)
