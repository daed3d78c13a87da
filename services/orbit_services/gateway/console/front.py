"""What a browser gets outside ``/ui``: the root, the favicon and the API's docs pages.

- ``/`` sends a browser (``Accept: text/html``) to the console; any other client
  gets a JSON index of where things are. Served without a token: it holds no data.
- ``/favicon.ico``, which browsers ask for without a token on every page (a 401
  there was an error in each page's log).
- ``/docs`` (Swagger UI) and ``/redoc``, whose files FastAPI's own pages load from
  a CDN, so that they were blank offline. The files come from the pinned
  fastapi-standalone-docs package (Swagger UI, Apache-2.0, and ReDoc, MIT, each
  with its licence beside it in the package) and are served from here, at the
  paths that package's own layout expects (ReDoc finds its logo beside its page).
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Awaitable, Callable
from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
)

from orbit_services.gateway.console import paths
from orbit_services.gateway.console.render import HERE

FAVICON = "/favicon.ico"
_ASSETS = Path(str(files("fastapi_standalone_docs") / "static"))
ASSETS = {
    "/docs/swagger-ui-bundle.js": _ASSETS / "swagger" / "swagger-ui-bundle.js",
    "/docs/swagger-ui.css": _ASSETS / "swagger" / "swagger-ui.css",
    "/redoc/redoc.standalone.js": _ASSETS / "redoc" / "redoc.standalone.js",
    "/redoc/logo-mini.svg": _ASSETS / "redoc" / "logo-mini.svg",
}
OPEN_PATHS = frozenset({"/", FAVICON, *ASSETS})
"""Served without a token, beside the API's description (``/docs``, ``/redoc``)."""
INDEX = {
    "console": paths.MOUNT,
    "api": "/v1",
    "docs": "/docs",
    "openapi": "/openapi.json",
    "health": "/healthz",
}
_SWAGGER = {"validatorUrl": None}
"""Swagger UI would otherwise ask validator.swagger.io about the document."""
_DOCS_POLICY = (
    "img-src 'self' data:",
    "connect-src 'self'",
    "form-action 'none'",
    "base-uri 'none'",
    "frame-ancestors 'none'",
    "default-src 'none'",
)
"""What the docs pages' Content-Security-Policy says of all but scripts and styles
(:func:`_page`). Both pages draw icons as ``data:`` images."""
_INLINE_SCRIPT = re.compile(rb"<script>(.*?)</script>", re.DOTALL)


def mount_front(app: FastAPI) -> None:
    """Serve the root, the favicon and the docs pages; ``app`` was made with
    ``docs_url=None, redoc_url=None``, so that FastAPI's CDN pages are not served."""
    app.include_router(_router(app))


def _router(app: FastAPI) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/")
    async def root(request: Request) -> Response:
        if "text/html" in request.headers.get("accept", ""):
            return RedirectResponse(paths.MOUNT, 303)
        return JSONResponse({"name": app.title, **INDEX})

    @router.get(FAVICON)
    async def favicon() -> Response:
        return FileResponse(HERE / "static" / "favicon.ico", media_type="image/x-icon")

    swagger = _page(
        get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=f"{app.title}: API",
            swagger_js_url="/docs/swagger-ui-bundle.js",
            swagger_css_url="/docs/swagger-ui.css",
            swagger_favicon_url=FAVICON,
            swagger_ui_parameters=_SWAGGER,
        ),
        "style-src 'self'",
    )
    redoc = _page(
        get_redoc_html(
            openapi_url="/openapi.json",
            title=f"{app.title}: API",
            redoc_js_url="/redoc/redoc.standalone.js",
            redoc_favicon_url=FAVICON,
            with_google_fonts=False,
        ),
        # ReDoc's components add <style> elements as they render (styled-components),
        # and its search runs in a worker made from a blob of its own script.
        "style-src 'self' 'unsafe-inline'",
        "worker-src blob:",
    )
    router.add_api_route("/docs", swagger, methods=["GET"])
    router.add_api_route("/redoc", redoc, methods=["GET"])
    for path, file in ASSETS.items():
        router.add_api_route(path, _file(file), methods=["GET"])
    return router


def _page(page: HTMLResponse, *own: str) -> Callable[[], Awaitable[Response]]:
    """Serve ``page`` (the same for every request) under a policy that lets it run the
    gateway's scripts and its own inline ones (each by its hash), and nothing else;
    ``own``: what else the page needs (where its styles come from, say)."""
    body = bytes(page.body)
    inline = (hashlib.sha256(script).digest() for script in _INLINE_SCRIPT.findall(body))
    scripts = ["'self'", *(f"'sha256-{base64.b64encode(digest).decode()}'" for digest in inline)]
    policy = "; ".join((f"script-src {' '.join(scripts)}", *own, *_DOCS_POLICY))

    async def serve() -> Response:
        return HTMLResponse(body, headers={"content-security-policy": policy})

    return serve


def _file(path: Path) -> Callable[[], Awaitable[Response]]:
    async def serve() -> Response:
        return FileResponse(path)

    return serve
