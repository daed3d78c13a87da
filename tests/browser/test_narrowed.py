"""What a token narrowed to some workflows sees in the console, checked in Chromium: no
other workflow's name in the list's filter, and no child of another workflow on an
execution's page (that child is not found, as in the API)."""

from __future__ import annotations

from playwright.async_api import Page, expect

from examples.workers import TASKS
from tests.e2e.stack import running_stack
from tests.integration.conftest import OrbitEnv

from .conftest import EXAMPLES, base_url, sign_in

BILLING = """
orbit: 1
workflow: billing
version: 1.0.0
steps:
  - id: invoice
    workflow: send-invoice@1.0.0
    input: {order: o-1}
"""


async def test_a_narrowed_token_sees_no_other_workflow(page: Page, orbit_env: OrbitEnv) -> None:
    async with running_stack(orbit_env.settings_with(auth="tokens"), TASKS) as stack:
        await stack.client.deploy(EXAMPLES / "send-invoice.yaml", BILLING)
        started = await stack.client.start("billing", None, execution_id="b-1", wait=True)
        assert started["execution"].status == "completed", started
        narrowed = await stack.client.create_token("billing-reader", ["executions:read"], ["bill*"])
        await sign_in(page, stack, narrowed["token"])

        options = page.locator("#f-workflow option")
        await expect(options).to_have_text(["any", "billing"])
        await page.goto(f"{base_url(stack)}/ui/executions/b-1")
        await expect(page.locator("#live")).to_have_attribute("data-status", "completed")
        await expect(page.locator("ul.children")).to_have_count(0)  # send-invoice's
        answer = await page.goto(f"{base_url(stack)}/ui/executions/b-1:invoice")
        assert answer is not None
        assert answer.status == 404
