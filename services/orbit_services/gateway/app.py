"""The gateway's FastAPI application: the ``/v1`` API, health and readiness, metrics, errors."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.utils import get_openapi

from orbit_model.errors import ErrorCode, OrbitError
from orbit_services.gateway.api.executions import Executions
from orbit_services.gateway.api.routes import api_router
from orbit_services.gateway.api.schemas import ErrorResponse, Health
from orbit_services.gateway.api.token_routes import token_router
from orbit_services.gateway.console.front import OPEN_PATHS as FRONT_PATHS
from orbit_services.gateway.console.front import mount_front
from orbit_services.gateway.console.mount import mount_console
from orbit_services.gateway.edge.auth import (
    AUTH_DISABLED_WARNING,
    OPEN_PATHS,
    Authenticate,
    check_token,
    grant_of,
)
from orbit_services.gateway.edge.guard import ENVELOPE_BYTES, BodyGuard
from orbit_services.gateway.edge.hosts import HostGuard
from orbit_services.gateway.edge.jwt_auth import JwtVerifier
from orbit_services.gateway.errors import install_error_handlers
from orbit_services.runtime import metrics
from orbit_services.runtime.settings import Settings

Check = Callable[[], Awaitable[object]]
"""A readiness probe: returns when its dependency answers, raises when it does not."""

CHECK_TIMEOUT_SECONDS = 2.0
ERROR_SCHEMA = "#/components/schemas/ErrorResponse"

_DESCRIPTION = """\
Orbit's HTTP API: register workflow definitions, start executions, signal,
cancel, query and watch them. Every error is
`{"error": {"code": "...", "message": "..."}}` with the code's HTTP status.
"""


def _version() -> str:
    try:
        return version("orbit-server")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0"


def create_app(executions: Executions, checks: Mapping[str, Check] | None = None) -> FastAPI:
    """The HTTP API over ``executions``.

    Args:
        executions: The operations the routes call.
        checks: Readiness probes by name (e.g. ``postgres``, ``rabbitmq``);
            ``/readyz`` answers 503 ``UNAVAILABLE`` unless all of them pass.
    """
    app = FastAPI(
        title="Orbit gateway",
        version=_version(),
        description=_DESCRIPTION,
        docs_url=None,  # served by mount_front, with no CDN
        redoc_url=None,
    )
    install_error_handlers(app)
    settings = executions.settings
    payload = settings.max_payload_bytes
    limit = (
        None if payload is None else max(payload + ENVELOPE_BYTES, settings.max_definition_bytes)
    )
    # Added last, run first: the Host check, then the token, then the body's type and size.
    app.add_middleware(BodyGuard, max_body_bytes=limit)
    auth_on = settings.auth != "disabled"
    open_paths = OPEN_PATHS | FRONT_PATHS | ({"/metrics"} if settings.metrics_public else set())
    jwts = _jwt_verifier(settings) if auth_on else None
    app.add_middleware(
        Authenticate,
        tokens=executions.store.tokens if auth_on else None,
        open_paths=open_paths,
        jwts=jwts,
    )
    if settings.http_cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.http_cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["authorization", "content-type"],
        )
    app.add_middleware(
        HostGuard,
        allowed=settings.http_allowed_hosts,
        bind_host=settings.http_host,
        port=settings.http_port,
    )
    app.include_router(api_router(executions))
    app.include_router(token_router(executions.store.tokens))
    warnings = [] if auth_on else [AUTH_DISABLED_WARNING]
    app.include_router(_health_router(dict(checks or {}), warnings))
    app.include_router(_metrics_router(public=settings.metrics_public))
    tokens = executions.store.tokens
    mount_console(
        app,
        executions,
        (lambda token: check_token(tokens, jwts, token)) if auth_on else None,
    )
    mount_front(app)
    app.openapi = lambda: _openapi(app, None if not auth_on else open_paths)  # type: ignore[method-assign]
    return app


def _jwt_verifier(settings: Settings) -> JwtVerifier | None:
    if settings.auth_jwks_url is None or settings.auth_jwt_audience is None:
        return None
    return JwtVerifier(
        settings.auth_jwks_url,
        settings.auth_jwt_audience,
        settings.auth_jwt_issuer,
        settings.auth_jwt_scopes_claim,
        settings.auth_jwt_workflows_claim,
    )


def _health_router(checks: dict[str, Check], warnings: list[str]) -> APIRouter:
    router = APIRouter()

    @router.get("/healthz", response_model=Health, summary="The process answers")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok"}

    @router.get(
        "/readyz",
        response_model=Health,
        summary="Postgres and RabbitMQ answer",
        responses={503: {"model": ErrorResponse}},
    )
    async def readyz() -> dict[str, Any]:
        answers = await asyncio.gather(*(_probe(check) for check in checks.values()))
        results = dict(zip(checks, answers, strict=True))
        failing = [f"{name}: {result}" for name, result in results.items() if result != "ok"]
        if failing:
            raise OrbitError(ErrorCode.UNAVAILABLE, "not ready: " + "; ".join(failing))
        return {"status": "ready", "checks": results, "warnings": warnings}

    return router


async def _probe(check: Check) -> str:
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_SECONDS):
            await check()
    except TimeoutError:
        return f"no answer within {CHECK_TIMEOUT_SECONDS:g} s"
    except Exception as error:
        return str(error) or type(error).__name__
    return "ok"


def _metrics_router(*, public: bool) -> APIRouter:
    router = APIRouter()

    @router.get(
        "/metrics",
        summary="Prometheus metrics of this process (every service in it)",
        response_class=Response,
        responses={200: {"content": {"text/plain": {}}}},
    )
    async def prometheus_metrics(request: Request) -> Response:
        # Any token that sees every workflow: the counters name them all.
        if not public and not (await grant_of(request)).everything:
            raise OrbitError(
                ErrorCode.PERMISSION_DENIED,
                "/metrics shows every workflow: a token narrowed to some cannot read it",
            )
        body, content_type = metrics.exposition()
        return Response(body, media_type=content_type)

    return router


def _openapi(app: FastAPI, open_paths: frozenset[str] | None) -> dict[str, Any]:
    """FastAPI's document, without the 422 answers it adds (invalid requests get a 400),
    and, when ``open_paths`` is given (auth on), a bearer token required on every other
    path."""
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        for path in schema.get("paths", {}).values():
            for operation in path.values():
                operation.get("responses", {}).pop("422", None)
        for name in ("HTTPValidationError", "ValidationError"):
            schema.get("components", {}).get("schemas", {}).pop(name, None)
        if open_paths is not None:
            _require_bearer(schema, open_paths)
        app.openapi_schema = schema
    return app.openapi_schema


def _require_bearer(schema: dict[str, Any], open_paths: frozenset[str]) -> None:
    """Say in the document that every operation but those of ``open_paths`` needs a token,
    and that it may answer 401 and 403 with the usual error body."""
    components = schema.setdefault("components", {})
    components.setdefault("securitySchemes", {})["bearer"] = {
        "type": "http",
        "scheme": "bearer",
        "description": "An API token (orbit token create); docs/security.md",
    }
    error = {"content": {"application/json": {"schema": {"$ref": ERROR_SCHEMA}}}}
    for path, operations in schema.get("paths", {}).items():
        for operation in operations.values():
            if path in open_paths:
                operation["security"] = []
                continue
            operation["security"] = [{"bearer": []}]
            responses = operation.setdefault("responses", {})
            responses.setdefault("401", {"description": "no valid API token", **error})
            responses.setdefault("403", {"description": "the token lacks the scope", **error})
