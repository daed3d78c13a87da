"""The console's tour in Chromium: sign in, watch an approval arrive in the list, open it,
read why it waits, answer it from the signal form and watch it complete without a
reload; then a read-only token sees no action and its forged POST is refused."""

from __future__ import annotations

from playwright.async_api import Page, expect

from orbit_model.views import view_json
from tests.e2e.stack import Stack

from .conftest import base_url, no_serious_violations, screenshot, sign_in

LIVE_TIMEOUT_MS = 20_000


async def test_the_tour(page: Page, stack: Stack) -> None:
    await sign_in(page, stack)
    await expect(page.get_by_role("heading", name="Executions")).to_be_visible()
    await no_serious_violations(page)

    started = await stack.client.start("approval", {"request": "a new laptop"})
    execution_id = started["execution_id"]
    row = page.locator(f'tr[data-execution="{execution_id}"]')
    await expect(row).to_be_visible(timeout=LIVE_TIMEOUT_MS)  # the list refreshed itself
    await screenshot(page, "executions")

    await row.get_by_role("link", name=execution_id).click()
    await expect(page.locator(".banner")).to_contain_text(
        "waiting for signal decision", timeout=LIVE_TIMEOUT_MS
    )
    await expect(page.locator(".step-graph g.node")).to_have_count(3)
    await no_serious_violations(page)
    await screenshot(page, "execution-waiting")

    await page.evaluate("window.tourMarker = 'still here'")  # gone if the page reloads
    form = page.locator('form[data-signal="decision"]')
    await form.get_by_label("approved (required)").select_option("true")
    await form.get_by_label("comment").fill("approved from the console")
    await form.get_by_role("button", name="Send decision").click()
    await expect(page.locator("#action-result")).to_have_text(
        "Signal decision sent: step decision waits for it and takes it."
    )
    await expect(page.locator("#live")).to_have_attribute(
        "data-status", "completed", timeout=LIVE_TIMEOUT_MS
    )
    assert await page.evaluate("window.tourMarker") == "still here"
    await expect(page.locator(".banner")).to_have_count(0)
    # The refresh that saw it end took its forms away: nothing is left to send it.
    await expect(page.locator("#controls")).to_have_text(
        "It has ended: there is nothing left to send it."
    )
    await expect(page.locator("form.signal-form")).to_have_count(0)
    await expect(page.locator("details.cancel")).to_have_count(0)

    timeline = page.locator("svg.timeline")
    await expect(timeline.locator('rect.bar[data-kind="await"]')).to_have_count(1)
    await expect(timeline.locator('rect.bar[data-kind="attempt-succeeded"]')).to_have_count(2)
    nodes = page.locator(".step-graph g.node")
    await expect(nodes).to_have_count(3)
    for step in ("submit", "decision", "notify"):
        await expect(nodes.locator(f'xpath=self::*[@data-step="{step}"]')).to_have_attribute(
            "data-status", "succeeded"
        )
    await expect(page.locator("#output-h")).to_be_visible()
    await screenshot(page, "execution-completed")

    history = page.locator("ol.history > li")
    signal = page.locator('ol.history > li[data-type="SignalReceived"]')
    await signal.locator("summary").click()
    await expect(signal.locator("pre")).to_contain_text("approved from the console")
    await page.get_by_label("Event type").select_option("WorkflowCompleted")
    await page.get_by_role("button", name="Show").click()
    await expect(history).to_have_count(1)
    await expect(history.first).to_have_attribute("data-type", "WorkflowCompleted")
    await no_serious_violations(page)


async def test_a_read_only_token_sees_no_action_and_cannot_forge_one(
    page: Page, stack: Stack
) -> None:
    reader = await stack.client.create_token("reader", ["executions:read", "workers:read"])
    started = await stack.client.start("approval", {"request": "a chair"})
    execution_id = started["execution_id"]
    await sign_in(page, stack, reader["token"])
    await page.goto(f"{base_url(stack)}/ui/executions/{execution_id}")
    await expect(page.locator(".banner")).to_contain_text(
        "waiting for signal decision", timeout=LIVE_TIMEOUT_MS
    )
    await expect(page.locator("form.signal-form")).to_have_count(0)
    await expect(page.locator("details.cancel")).to_have_count(0)
    await expect(page.get_by_role("button", name="Run query")).to_be_visible()  # a read

    csrf = await page.locator('input[name="csrf"]').first.get_attribute("value")
    for action, form in (
        ("signals/decision", {"csrf": csrf or "", "field.approved": "true"}),
        ("cancel", {"csrf": csrf or "", "reason": "forged"}),
    ):
        answer = await page.request.post(
            f"{base_url(stack)}/ui/executions/{execution_id}/{action}", form=form
        )
        assert answer.status == 403, (action, answer.status)
        assert "Not allowed" in await answer.text()
    view = view_json(await stack.client.get(execution_id))
    assert view["status"] == "running"
    assert view["steps"]["decision"]["status"] != "succeeded"


async def test_a_post_without_the_csrf_token_is_refused(page: Page, stack: Stack) -> None:
    started = await stack.client.start("approval", {"request": "a desk"})
    await sign_in(page, stack)
    url = f"{base_url(stack)}/ui/executions/{started['execution_id']}/cancel"
    answer = await page.request.post(url, form={"reason": "no token"})
    assert answer.status == 403
    answer = await page.request.post(url, form={"csrf": "x" * 32, "reason": "wrong token"})
    assert answer.status == 403
    assert (await stack.client.get(started["execution_id"])).status == "running"


async def test_the_console_cookie_opens_nothing_under_v1(page: Page, stack: Stack) -> None:
    started = await stack.client.start("approval", {"request": "a lamp"})
    await sign_in(page, stack)
    api = f"{base_url(stack)}/v1/executions/{started['execution_id']}"
    assert (await page.request.get(api)).status == 401  # the cookie is the console's only
    answer = await page.request.post(api + "/cancel", form={"reason": "cross-site"})
    assert answer.status in (401, 415)
    assert (await stack.client.get(started["execution_id"])).status == "running"


async def test_signing_in_with_a_wrong_token_says_so(page: Page, stack: Stack) -> None:
    await page.goto(base_url(stack) + "/ui/workers")
    await expect(page).to_have_url(f"{base_url(stack)}/ui/login?next=%2Fui%2Fworkers")
    await page.get_by_label("API token").fill("orbit_not-a-real-token-at-all-0000000000")
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("alert")).to_contain_text("not valid")
    await no_serious_violations(page)
    await page.get_by_label("API token").fill(stack.token or "")
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("heading", name="Workers")).to_be_visible()
    cookie = next(c for c in await page.context.cookies() if c["name"] == "orbit_console")
    assert cookie["httpOnly"]
    assert cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/ui"
