"""Which answers get the pages' headers (gateway/console/headers.py), without a browser:
every page's path, its refusals and redirects included; not the API's answers, and no
``no-store`` on the console's static files; a header a route set itself is kept."""

from __future__ import annotations

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from orbit_services.gateway.console.headers import CONSOLE_POLICY, PageHeaders


async def answer(request: Request) -> Response:
    if request.url.path == "/ui/login-first":
        return RedirectResponse("/ui/login", 303)
    if request.url.path == "/docs":
        return PlainTextResponse("docs", headers={"content-security-policy": "its own"})
    return PlainTextResponse("ok", status_code=404 if "nowhere" in request.url.path else 200)


APP = PageHeaders(Starlette(routes=[Route("/{path:path}", answer)]))


async def headers_of(path: str) -> httpx.Headers:
    transport = httpx.ASGITransport(app=APP)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        return (await client.get(path)).headers


@pytest.mark.parametrize("path", ["/ui", "/ui/executions/e-1", "/ui/nowhere", "/ui/login-first"])
async def test_a_console_page_gets_every_header(path: str) -> None:
    headers = await headers_of(path)
    assert headers["x-frame-options"] == "DENY"
    assert headers["content-security-policy"] == CONSOLE_POLICY
    assert "frame-ancestors 'none'" in CONSOLE_POLICY
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "same-origin"
    assert headers["cache-control"] == "no-store"


async def test_static_files_and_the_pages_outside_ui_may_be_cached() -> None:
    for path in ("/ui/static/console.css", "/", "/favicon.ico", "/redoc/redoc.standalone.js"):
        headers = await headers_of(path)
        assert headers["x-frame-options"] == "DENY", path
        assert "cache-control" not in headers, path


async def test_a_pages_own_policy_is_kept_and_the_api_gets_none() -> None:
    assert (await headers_of("/docs"))["content-security-policy"] == "its own"
    for path in ("/v1/executions", "/healthz", "/openapi.json", "/uix"):
        headers = await headers_of(path)
        assert "x-frame-options" not in headers, path
        assert "content-security-policy" not in headers, path
