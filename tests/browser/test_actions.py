"""The execution page's actions in Chromium: a signal's answer says which step takes it,
or that none will; a cancel takes the forms away at once, and the refresh that sees the
execution end leaves none behind."""

from __future__ import annotations

from playwright.async_api import Page, expect

from tests.e2e.stack import Stack

from .conftest import base_url, no_serious_violations, sign_in

LIVE_TIMEOUT_MS = 20_000

NOTES = """
orbit: 1
workflow: notes
version: 1.0.0
signals:
  go: {}
  note: {}
steps:
  - id: pause
    sleep: 1h
  - id: wait
    await: go
"""


async def send(page: Page, signal: str) -> None:
    form = page.locator(f'form[data-signal="{signal}"]')
    await form.get_by_role("button", name=f"Send {signal}").click()


async def test_a_signal_says_whether_a_step_takes_it(page: Page, stack: Stack) -> None:
    await stack.client.deploy(NOTES)
    execution_id = (await stack.client.start("notes", {}))["execution_id"]
    await sign_in(page, stack)
    await page.goto(f"{base_url(stack)}/ui/executions/{execution_id}")
    result = page.locator("#action-result")

    await send(page, "go")  # its await comes after an hour's sleep
    await expect(result).to_have_text(
        "Signal go sent. No step waits for it now: it is kept until step wait,"
        " not reached yet, takes it."
    )
    await send(page, "go")  # the one await takes the first go: none is left for this
    never = (
        "Signal go recorded, but no step will take it: no await step for go is left to"
        " run. Only expressions that read signals.go see it."
    )
    await expect(result).to_have_text(never)
    await send(page, "note")  # no step awaits note at all
    await expect(result).to_contain_text("no await step for note is left to run")
    await expect(page.locator("form.signal-form")).to_have_count(2)  # still running
    await no_serious_violations(page)

    # Without JavaScript the form redirects to the page, which says the same.
    csrf = await page.locator('input[name="csrf"]').first.get_attribute("value")
    answer = await page.request.post(
        f"{base_url(stack)}/ui/executions/{execution_id}/signals/go", form={"csrf": csrf or ""}
    )
    assert answer.ok
    assert never in await answer.text()


async def test_a_cancel_takes_the_forms_away(page: Page, stack: Stack) -> None:
    execution_id = (await stack.client.start("approval", {"request": "a bike"}))["execution_id"]
    await sign_in(page, stack)
    await page.goto(f"{base_url(stack)}/ui/executions/{execution_id}")
    await expect(page.locator(".banner")).to_contain_text(
        "waiting for signal decision", timeout=LIVE_TIMEOUT_MS
    )
    await page.get_by_text("Cancel this execution…").click()
    await page.get_by_label("Reason").fill("not needed")
    await page.get_by_role("button", name="Yes, cancel it").click()
    await expect(page.locator("#action-result")).to_have_text("Cancellation requested.")
    await expect(page.locator("form.signal-form")).to_have_count(0)
    await expect(page.locator("details.cancel")).to_have_count(0)
    await expect(page.locator("#live")).to_have_attribute(
        "data-status", "cancelled", timeout=LIVE_TIMEOUT_MS
    )
    await expect(page.locator("#controls")).to_have_text(
        "It has ended: there is nothing left to send it."
    )

    # A form still open elsewhere: its answer says why, and takes the forms away too.
    answer = await page.request.post(
        f"{base_url(stack)}/ui/executions/{execution_id}/cancel",
        form={"csrf": await csrf_of(page), "reason": "again"},
        headers={"HX-Request": "true"},
    )
    assert answer.status == 409
    html = await answer.text()
    assert "has ended" in html
    assert 'hx-swap-oob="true"' in html
    assert "<form" not in html


async def csrf_of(page: Page) -> str:
    return await page.locator('input[name="csrf"]').first.get_attribute("value") or ""
