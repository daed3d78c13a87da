"""What the console's pages tell the browser, checked in Chromium: no page of another
origin may frame them, every page sends its Content-Security-Policy (and nosniff,
no-store, a referrer policy), and no page, nor any part htmx swaps into one, breaks
a rule of its policy. ``/docs`` and ``/redoc`` get the same, with a policy of their own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from playwright.async_api import APIResponse, Browser, Page, Response, expect

from tests.e2e.stack import Stack

from .conftest import EXAMPLES, base_url, sign_in

LIVE_TIMEOUT_MS = 20_000
CONSOLE_PAGES = ("/ui", "/ui/workers", "/ui/definitions", "/ui/nowhere")
DOCS_PAGES = ("/docs", "/redoc")

REPORTER = """
document.addEventListener("securitypolicyviolation", (e) => window.cspViolation(
    `${location.pathname}: ${e.effectiveDirective} blocked ${e.blockedURI || "inline"}`
    + ` (${e.sourceFile}:${e.lineNumber})`));
"""


@pytest.fixture
async def watched(browser: Browser) -> AsyncIterator[tuple[Page, list[str]]]:
    """A page that notes every violation of a Content-Security-Policy, on every document
    it opens (htmx's swaps included)."""
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    violations: list[str] = []

    def note(violation: str) -> None:
        violations.append(violation)

    await context.expose_function("cspViolation", note)
    await context.add_init_script(REPORTER)
    page = await context.new_page()
    page.on(
        "console",
        lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None,
    )
    yield page, violations
    await context.close()


@asynccontextmanager
async def serving(html: str) -> AsyncIterator[str]:
    """A page of another origin: ``html`` served on another port of the same host, to any
    request, by a server of the test's own; its URL."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = html.encode()
        head = f"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {len(body)}\r\n"
        writer.write(head.encode() + b"connection: close\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    finally:
        server.close()
        await server.wait_closed()


def assert_page_headers(response: Response | APIResponse | None, path: str) -> None:
    """The headers every page sends, whoever asks: framing refused, no sniffing, no
    referrer to other origins, and a policy that lets nothing come from elsewhere."""
    assert response is not None, path
    headers = response.headers
    assert headers.get("x-frame-options") == "DENY", path
    policy = headers.get("content-security-policy", "")
    assert "frame-ancestors 'none'" in policy, (path, policy)
    assert "default-src 'none'" in policy, (path, policy)
    assert "base-uri 'none'" in policy, (path, policy)
    assert headers.get("x-content-type-options") == "nosniff", path
    assert headers.get("referrer-policy") == "same-origin", path
    if path.startswith("/ui"):
        assert headers.get("cache-control") == "no-store", path


async def test_a_page_of_another_origin_cannot_frame_the_console(
    browser: Browser, stack: Stack
) -> None:
    """The attack of the probe: a page on another port of the same host framed the
    signed-in console (``SameSite=Strict`` lets the cookie through: it is the same
    site), and two clicks inside the frame cancelled an execution."""
    execution_id = (await stack.client.start("approval", {"request": "a frame"}))["execution_id"]
    console = f"{base_url(stack)}/ui/executions/{execution_id}"
    context = await browser.new_context()
    page = await context.new_page()
    await sign_in(page, stack)
    await page.goto(console)  # the console itself opens, signed in
    await expect(page.locator("h1")).to_have_text(execution_id)

    framing = f'<!doctype html><title>A game</title><iframe src="{console}"></iframe>'
    async with serving(framing) as elsewhere:
        await page.goto(elsewhere)
        await page.wait_for_load_state("load")  # the frame's own load (or refusal) included
    framed = [frame for frame in page.frames if frame != page.main_frame]
    assert len(framed) == 1
    assert not framed[0].url.startswith(base_url(stack)), framed[0].url
    assert await page.frame_locator("iframe").locator("details.cancel").count() == 0
    assert (await stack.client.get(execution_id)).status == "running"

    for path in (*CONSOLE_PAGES, "/ui/login", f"/ui/executions/{execution_id}", *DOCS_PAGES):
        assert_page_headers(await page.request.get(base_url(stack) + path), path)
    await context.close()


async def test_no_page_breaks_a_rule_of_its_policy(
    watched: tuple[Page, list[str]], stack: Stack
) -> None:
    page, violations = watched
    newer = (EXAMPLES / "approval.yaml").read_text().replace("version: 1.0.0", "version: 1.1.0")
    await stack.client.deploy(newer)
    origin = base_url(stack)
    assert_page_headers(await page.goto(origin + "/ui/login"), "/ui/login")
    await sign_in(page, stack)

    # The list, and the part htmx swaps into it every few seconds.
    started = await stack.client.start("approval", {"request": "a policy"})
    row = page.locator(f'tr[data-execution="{started["execution_id"]}"]')
    await expect(row).to_be_visible(timeout=LIVE_TIMEOUT_MS)

    # An execution: its drawings, its live refresh, a query and a signal sent by htmx.
    assert_page_headers(
        await page.goto(f"{origin}/ui/executions/{started['execution_id']}"), "/ui/e"
    )
    await expect(page.locator(".banner")).to_contain_text(
        "waiting for signal decision", timeout=LIVE_TIMEOUT_MS
    )
    await expect(page.locator(".step-graph g.node")).to_have_count(3)
    async with page.expect_response(lambda r: r.request.headers.get("hx-target") == "live"):
        pass  # one refresh of the live part, swapped in
    form = page.locator('form[data-signal="decision"]')
    await form.get_by_label("approved (required)").select_option("true")
    await form.get_by_role("button", name="Send decision").click()
    await expect(page.locator("#live")).to_have_attribute(
        "data-status", "completed", timeout=LIVE_TIMEOUT_MS
    )

    for path in (*CONSOLE_PAGES, "/ui/definitions/approval/1.1.0?diff=1.0.0"):
        assert_page_headers(await page.goto(origin + path), path)
        await page.wait_for_load_state("networkidle")
    await expect(page.locator(".diff-add").first).to_be_visible()

    assert_page_headers(await page.goto(origin + "/docs"), "/docs")
    await expect(page.locator(".swagger-ui .info .title")).to_contain_text("Orbit gateway")
    await page.locator(".opblock-summary").first.click()  # an operation, opened
    await expect(page.locator(".opblock-body").first).to_be_visible()
    assert_page_headers(await page.goto(origin + "/redoc"), "/redoc")
    await expect(page.locator("h1").first).to_contain_text("Orbit gateway")
    await page.wait_for_load_state("networkidle")
    assert violations == []
