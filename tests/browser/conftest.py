"""The console in a real browser: Playwright drives Debian's Chromium (no browser is
downloaded; ``ORBIT_TEST_CHROMIUM`` names another binary) against a whole Orbit in
the test process, with a database and namespace of the test's own."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from axe_playwright_python.async_playwright import Axe
from playwright.async_api import Browser, Page, async_playwright, expect

from examples.workers import TASKS
from tests.e2e.stack import Stack, running_stack
from tests.integration.conftest import OrbitEnv, installation, template_database, urls
from tests.integration.services import ServiceUrls

__all__ = ["template_database", "urls"]

EXAMPLES = Path(__file__).parents[2] / "examples"
SCREENSHOTS = os.environ.get("ORBIT_CONSOLE_SCREENSHOTS")
"""A folder to save the pages' screenshots in (``make console-screenshots``); none: not saved."""

# Playwright's 5 s for an expectation is short on a machine busy with other tests (the
# API docs' page parses 1.5 MB of script first): a failure only takes longer to say.
expect.set_options(timeout=15_000)


def chromium_path() -> str:
    found = os.environ.get("ORBIT_TEST_CHROMIUM") or shutil.which("chromium")
    if found is None:
        pytest.fail("no chromium: apt-get install chromium (or set ORBIT_TEST_CHROMIUM)")
    return found


@pytest.fixture
async def orbit_env(urls: ServiceUrls, template_database: str) -> AsyncIterator[OrbitEnv]:
    async with installation(urls, template_database, broker_auth="roles") as env:
        yield env


@pytest.fixture
async def stack(orbit_env: OrbitEnv) -> AsyncIterator[Stack]:
    async with running_stack(orbit_env.settings_with(auth="tokens"), TASKS) as running:
        await running.client.deploy(
            EXAMPLES / "approval.yaml", EXAMPLES / "send-invoice.yaml", EXAMPLES / "fan-out.yaml"
        )
        yield running


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=chromium_path())
        yield launched
        await launched.close()


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    opened = await context.new_page()
    yield opened
    await context.close()


def base_url(stack: Stack) -> str:
    return f"http://127.0.0.1:{stack.settings.http_port}"


async def sign_in(page: Page, stack: Stack, token: str | None = None) -> None:
    """Sign in through the login page, as a person would."""
    await page.goto(base_url(stack) + "/ui")
    await page.get_by_label("API token").fill(token or stack.token or "")
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url("**/ui")


AXE = Axe()


async def no_serious_violations(page: Page) -> None:
    """axe-core's check of the page as it is: no violation of serious or critical impact."""
    results = await AXE.run(page)
    serious = [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
        for v in results.response["violations"]
        if v.get("impact") in ("serious", "critical")
    ]
    assert not serious, serious


async def screenshot(page: Page, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"), full_page=True)
