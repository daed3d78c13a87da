"""What a browser gets outside ``/ui``: ``/`` leads to the console, the favicon needs no
token (no page logs an error for it), and the API's docs pages load every file from the
gateway itself, so that they work offline."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from playwright.async_api import Browser, Page, Route, expect

from tests.e2e.stack import Stack

from .conftest import base_url, sign_in


async def test_the_root_leads_a_browser_to_the_console(page: Page, stack: Stack) -> None:
    await page.goto(base_url(stack) + "/")
    await expect(page).to_have_url(f"{base_url(stack)}/ui/login?next=%2Fui")
    await sign_in(page, stack)
    await page.goto(base_url(stack) + "/")
    await expect(page).to_have_url(f"{base_url(stack)}/ui")
    await expect(page.get_by_role("heading", name="Executions")).to_be_visible()
    # Another client gets JSON: where the API, its docs and the console are.
    answer = await page.request.get(base_url(stack) + "/", headers={"accept": "*/*"})
    assert answer.status == 200
    assert (await answer.json())["console"] == "/ui"
    assert (await answer.json())["api"] == "/v1"


async def test_no_page_logs_an_error_and_the_favicon_needs_no_token(
    browser: Browser, stack: Stack
) -> None:
    context = await browser.new_context()  # signed out: no cookie
    page = await context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("response", lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    favicon = await page.request.get(base_url(stack) + "/favicon.ico")
    assert (favicon.status, favicon.headers["content-type"]) == (200, "image/x-icon")
    assert (await favicon.body())[:4] == b"\x00\x00\x01\x00"  # an icon resource
    await sign_in(page, stack)
    for path in ("/ui", "/ui/workers", "/ui/definitions"):
        await page.goto(base_url(stack) + path)
        await page.wait_for_load_state("networkidle")
    assert await page.locator('link[rel="icon"]').get_attribute("href") == "/favicon.ico"
    assert errors == []
    await context.close()


EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["'](?:https?:)?//""", re.IGNORECASE)


async def test_the_api_docs_load_everything_from_the_gateway(
    browser: Browser, stack: Stack
) -> None:
    origin = base_url(stack)
    context = await browser.new_context()
    elsewhere: list[str] = []
    failed: list[str] = []

    async def offline(route: Route) -> None:
        """Refuse (and note) any request that leaves the gateway: as if offline."""
        if urlsplit(route.request.url).netloc == urlsplit(origin).netloc:
            await route.continue_()
        else:
            elsewhere.append(route.request.url)
            await route.abort()

    await context.route("**/*", offline)
    page = await context.new_page()
    page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)

    for path in ("/docs", "/redoc"):
        html = await (await page.request.get(origin + path)).text()
        assert not EXTERNAL.search(html), path
    await page.goto(origin + "/docs")
    await expect(page.locator(".swagger-ui .info .title")).to_contain_text("Orbit gateway")
    await expect(page.locator(".opblock").first).to_be_visible()
    await page.goto(origin + "/redoc")
    await expect(page.locator("h1").first).to_contain_text("Orbit gateway")
    await page.wait_for_load_state("networkidle")
    assert elsewhere == []
    assert failed == []
    await context.close()
