"""Who the console serves, checked in Chromium: its cookie holds a session, not the API
token; signing out ends the session (a copied cookie with it), and so do revoking the
token and the session's expiry; a form's CSRF token is its session's own."""

from __future__ import annotations

from datetime import timedelta

from playwright.async_api import Browser, Page, expect

from tests.database import Database
from tests.e2e.stack import Stack, running_stack
from tests.integration.conftest import OrbitEnv

from .conftest import base_url, sign_in

LIVE_TIMEOUT_MS = 20_000
SESSION_SECONDS = 600


async def csrf_of(page: Page) -> str:
    return await page.locator('input[name="csrf"]').first.get_attribute("value") or ""


async def test_a_csrf_token_is_good_for_its_own_session_only(
    browser: Browser, stack: Stack
) -> None:
    execution_id = (await stack.client.start("approval", {"request": "a csrf"}))["execution_id"]
    cancel = f"{base_url(stack)}/ui/executions/{execution_id}/cancel"
    first, second = await browser.new_context(), await browser.new_context()
    pages = [await first.new_page(), await second.new_page()]
    for page in pages:  # two sessions of one token
        await sign_in(page, stack)
        await page.goto(f"{base_url(stack)}/ui/executions/{execution_id}")
    page = pages[1]

    # A value of one's own choosing, as a cookie and as the field (the probe's case: a
    # sibling subdomain can set a cookie for this host).
    chosen = "chosen-by-the-attacker-" + "x" * 24
    await second.add_cookies(
        [{"name": "orbit_csrf", "value": chosen, "url": base_url(stack) + "/ui"}]
    )
    answer = await page.request.post(cancel, form={"csrf": chosen, "reason": "chosen"})
    assert answer.status == 403
    # The token of another session (of the same API token, even).
    answer = await page.request.post(cancel, form={"csrf": await csrf_of(pages[0]), "reason": "x"})
    assert answer.status == 403
    assert (await stack.client.get(execution_id)).status == "running"
    # Its own.
    answer = await page.request.post(cancel, form={"csrf": await csrf_of(page), "reason": "mine"})
    assert answer.ok
    assert (await stack.client.get(execution_id)).status in ("cancelled", "running")
    await first.close()
    await second.close()


async def test_signing_out_ends_the_session_a_copied_cookie_held(
    browser: Browser, stack: Stack
) -> None:
    context, thief = await browser.new_context(), await browser.new_context()
    page = await context.new_page()
    await sign_in(page, stack)
    cookie = next(c for c in await context.cookies() if c["name"] == "orbit_console")
    assert cookie["value"] != stack.token  # the cookie is not the API token
    await thief.add_cookies([cookie])
    copy = await thief.new_page()
    await copy.goto(base_url(stack) + "/ui/workers")
    await expect(copy.get_by_role("heading", name="Workers")).to_be_visible()

    await page.get_by_role("button", name="Sign out").click()
    await page.wait_for_url("**/ui/login")
    await copy.goto(base_url(stack) + "/ui/workers")
    await expect(copy).to_have_url(f"{base_url(stack)}/ui/login?next=%2Fui%2Fworkers")
    await page.goto(base_url(stack) + "/ui")
    await expect(page).to_have_url(f"{base_url(stack)}/ui/login?next=%2Fui")
    await context.close()
    await thief.close()


async def test_revoking_the_token_ends_its_sessions(page: Page, stack: Stack) -> None:
    person = await stack.client.create_token("person", ["executions:read"])
    await sign_in(page, stack, person["token"])
    await page.goto(base_url(stack) + "/ui/definitions")
    await expect(page.get_by_role("heading", name="Definitions")).to_be_visible()
    await stack.client.revoke_token("person")
    await page.goto(base_url(stack) + "/ui/definitions")
    await expect(page).to_have_url(f"{base_url(stack)}/ui/login?next=%2Fui%2Fdefinitions")


async def test_a_session_ends_when_the_setting_says(page: Page, orbit_env: OrbitEnv) -> None:
    settings = orbit_env.settings_with(auth="tokens", console_session_seconds=SESSION_SECONDS)
    async with running_stack(settings) as stack:
        await sign_in(page, stack)
        database = Database(stack.settings.database_url)
        rows = await database.fetch("SELECT created_at, expires_at FROM console_sessions")
        assert [row["expires_at"] - row["created_at"] for row in rows] == [
            timedelta(seconds=SESSION_SECONDS)
        ]
        # As if the time had passed: the next page asks to sign in again.
        await database.fetchval("UPDATE console_sessions SET expires_at = now() RETURNING 1")
        await page.goto(base_url(stack) + "/ui/workers")
        await expect(page).to_have_url(f"{base_url(stack)}/ui/login?next=%2Fui%2Fworkers")
