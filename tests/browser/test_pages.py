"""What the console draws and shows, checked in Chromium: the timeline's bars and the step
graph's nodes for a workflow with a retry, a fan-out of 5, a sleep and a child; the
workers and definitions pages (with a diff); the friendly 404; axe on every page."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from playwright.async_api import Browser, Page, expect

from examples.workers import TASKS
from orbit_sdk import TaskContext, TaskError, task
from orbit_services.gateway.console.graph import MIN_SCALE
from orbit_services.gateway.console.palette import BAR_COLOURS, STATUS_COLOURS
from tests.e2e.stack import Stack, running_stack
from tests.integration.conftest import OrbitEnv

from .conftest import EXAMPLES, base_url, no_serious_violations, screenshot, sign_in

MIXED = """
orbit: 1
workflow: mixed
version: 1.0.0
description: A retry, a fan-out of five, a sleep and a child.
input: {type: object, required: [numbers], properties: {numbers: {type: array}}}
tasks:
  flaky: {version: "1"}
  square: {version: "1"}
steps:
  - id: flaky
    task: flaky
    retry: {max_attempts: 3, initial_interval: 200ms}
  - id: squares
    for: ${ input.numbers }
    task: square
    input: {value: "${ item }"}
  - id: pause
    sleep: 300ms
  - id: invoice
    workflow: send-invoice@1.0.0
    input: {order: o-1}
"""


@task("flaky", version="1")
async def flaky(inp: Any, ctx: TaskContext) -> dict[str, Any]:
    if ctx.attempt == 1:
        raise TaskError("CARD_DECLINED", "the first attempt always fails")
    return {"attempt": ctx.attempt}


@pytest.fixture
async def mixed_stack(orbit_env: OrbitEnv) -> AsyncIterator[Stack]:
    async with running_stack(orbit_env.settings_with(auth="tokens"), [*TASKS, flaky]) as stack:
        await stack.client.deploy(EXAMPLES / "send-invoice.yaml")
        await stack.client.deploy(MIXED)
        yield stack


async def test_the_timeline_and_graph_of_a_retry_a_fan_out_a_sleep_and_a_child(
    page: Page, mixed_stack: Stack
) -> None:
    stack = mixed_stack
    started = await stack.client.start("mixed", {"numbers": [1, 2, 3, 4, 5]}, wait=True)
    assert started["execution"].status == "completed", started
    await sign_in(page, stack)
    await page.goto(f"{base_url(stack)}/ui/executions/{started['execution_id']}")
    await expect(page.locator("#live")).to_have_attribute("data-status", "completed")

    bars = page.locator("svg.timeline rect.bar")
    expected = {
        "attempt-failed": 1,  # flaky's first attempt
        "retry-wait": 1,
        "attempt-succeeded": 6,  # flaky's second, and the five squares
        "sleep": 1,
        "child": 1,
    }
    for kind, count in expected.items():
        of_kind = bars.and_(page.locator(f'[data-kind="{kind}"]'))
        await expect(of_kind).to_have_count(count)
        for fill in await of_kind.evaluate_all("bars => bars.map(b => b.getAttribute('fill'))"):
            assert fill == BAR_COLOURS[kind], kind
    assert await bars.count() == sum(expected.values())
    await expect(page.locator("svg.timeline .failure-mark")).to_have_count(1)

    nodes = page.locator(".step-graph g.node")
    await expect(nodes).to_have_count(4)
    await expect(page.locator(".step-graph path.edge")).to_have_count(3)
    fills = await nodes.evaluate_all(
        "nodes => nodes.map(n => [n.dataset.status, n.querySelector('rect').getAttribute('fill')])"
    )
    assert fills == [["succeeded", STATUS_COLOURS["succeeded"]]] * 4
    await expect(page.locator('.step-graph g.node[data-step="squares"] .fanout')).to_have_text(
        "5/5"
    )
    await expect(page.locator('tr[data-step="flaky"]')).to_contain_text("e2e")  # its worker
    await screenshot(page, "execution-timeline")
    await no_serious_violations(page)

    child = page.locator("ul.children a")
    await expect(child).to_have_count(1)
    await child.click()
    parent = page.locator("dd.parent")
    await expect(parent).to_have_text(f"{started['execution_id']}, step invoice")
    link = parent.get_by_role("link")
    await expect(link).to_have_attribute("href", f"/ui/executions/{started['execution_id']}")
    await link.click()
    await expect(page.locator("h1")).to_have_text(started["execution_id"])


REFUSING_CHILD = """
orbit: 1
workflow: refusing
version: 1.0.0
tasks:
  refuse: {version: "1"}
steps:
  - id: refuse
    task: refuse
    retry: {max_attempts: 1}
"""

RETRYING_PARENT = """
orbit: 1
workflow: retrying
version: 1.0.0
steps:
  - id: kid
    workflow: refusing@1.0.0
    retry: {max_attempts: 2, initial_interval: 100ms}
"""


@task("refuse", version="1")
async def refuse(inp: Any, ctx: TaskContext) -> None:
    raise TaskError("DECLINED", "the card was declined", details={"foo": "bar"})


async def test_a_failed_childs_cause_chain_and_every_attempts_child_are_shown(
    page: Page, orbit_env: OrbitEnv
) -> None:
    async with running_stack(orbit_env.settings_with(auth="tokens"), [refuse]) as stack:
        await stack.client.deploy(RETRYING_PARENT, REFUSING_CHILD)
        started = await stack.client.start("retrying", None, execution_id="r-1", wait=True)
        assert started["execution"].status == "failed", started
        await sign_in(page, stack)
        await page.goto(f"{base_url(stack)}/ui/executions/r-1")
        await expect(page.locator("#live")).to_have_attribute("data-status", "failed")
        children = page.locator("ul.children a")
        await expect(children).to_have_text(["r-1:kid", "r-1:kid:attempt-2"])
        causes = page.locator(".banner-error ol.causes > li")
        await expect(causes).to_have_count(3)
        await expect(causes.nth(0)).to_contain_text("caused by CHILD_FAILED in step kid:")
        await expect(causes.nth(2)).to_contain_text(
            "caused by DECLINED in step refuse of r-1:kid:attempt-2: the card was declined"
        )
        await expect(causes.nth(2)).to_contain_text('{"foo": "bar"}')
        await causes.nth(2).get_by_role("link").click()
        await expect(page.locator("h1")).to_have_text("r-1:kid:attempt-2")
        await no_serious_violations(page)


ORDER = {"order_id": "o-1", "items": [{"sku": "a"}], "callback_url": "http://127.0.0.1:9/"}
NARROW = {"width": 1366, "height": 900}
"""A common laptop's window, where order-fulfilment's graph used to overflow its box."""


async def test_the_order_graph_fits_its_box_in_a_1366_px_window(
    browser: Browser, stack: Stack
) -> None:
    await stack.client.deploy(EXAMPLES / "order-fulfilment.yaml")
    started = await stack.client.start("order-fulfilment", ORDER)
    context = await browser.new_context(viewport=NARROW)
    page = await context.new_page()
    await sign_in(page, stack)
    for path in (
        f"/ui/executions/{started['execution_id']}",
        "/ui/definitions/order-fulfilment/1.0.0",
    ):
        await page.goto(base_url(stack) + path)
        await expect(page.locator(".step-graph g.node")).to_have_count(8)
        box, scroll, shown, natural = await page.evaluate(
            """() => {
                const box = document.querySelector("#graph-h").parentElement
                    .querySelector(".drawing");
                const svg = box.querySelector("svg.step-graph");
                return [box.clientWidth, box.scrollWidth, svg.getBoundingClientRect().width,
                        svg.viewBox.baseVal.width];
            }"""
        )
        assert scroll <= box, (path, scroll, box)  # nothing hidden, no scroll bar
        assert shown <= box, (path, shown, box)
        assert shown / natural >= MIN_SCALE, (path, shown, natural)  # its text stays readable
    await context.close()


async def test_a_running_fan_out_shows_what_is_done(page: Page, stack: Stack) -> None:
    started = await stack.client.start("fan-out", {"numbers": [1, 2, 3, 4, 5]}, wait=True)
    await sign_in(page, stack)
    await page.goto(f"{base_url(stack)}/ui/executions/{started['execution_id']}")
    await expect(page.locator('.step-graph g.node[data-step="squares"] .fanout')).to_have_text(
        "5/5"
    )


async def test_workers_and_definitions_pages(page: Page, stack: Stack) -> None:
    newer = (EXAMPLES / "approval.yaml").read_text().replace("version: 1.0.0", "version: 1.1.0")
    newer = newer.replace("timeout: 7d", "timeout: 3d")
    await stack.client.deploy(newer)
    await sign_in(page, stack)

    await page.goto(f"{base_url(stack)}/ui/workers")
    worker = page.locator('tr[data-worker="e2e"]')
    await expect(worker).to_contain_text("online")
    await expect(worker).to_contain_text("submit-request@1")
    await no_serious_violations(page)
    await screenshot(page, "workers")

    await page.goto(f"{base_url(stack)}/ui/definitions")
    await expect(page.get_by_role("link", name="1.1.0")).to_be_visible()
    await no_serious_violations(page)
    await page.get_by_role("link", name="1.1.0").click()
    await expect(page.locator("pre.yaml")).to_contain_text("timeout: 3d")
    await expect(page.locator(".step-graph g.node")).to_have_count(3)
    await page.get_by_label("Compare with version").select_option("1.0.0")
    await page.get_by_role("button", name="Show the diff").click()
    await expect(page.locator(".diff-remove", has_text="timeout: 7d")).to_have_count(1)
    await expect(page.locator(".diff-add", has_text="timeout: 3d")).to_have_count(1)
    await expect(page.locator(".diff-add", has_text="version: 1.1.0")).to_have_count(1)
    await no_serious_violations(page)
    await screenshot(page, "definition-diff")


async def test_an_unknown_execution_gets_a_friendly_page(page: Page, stack: Stack) -> None:
    await sign_in(page, stack)
    answer = await page.goto(f"{base_url(stack)}/ui/executions/no-such-execution")
    assert answer is not None
    assert answer.status == 404
    assert answer.headers["content-type"].startswith("text/html")
    await expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    await expect(page.locator("main")).to_contain_text("no-such-execution")
    await expect(page.get_by_role("link", name="Back to the executions")).to_be_visible()
    await no_serious_violations(page)
    answer = await page.goto(f"{base_url(stack)}/ui/nowhere")
    assert answer is not None
    assert answer.status == 404
