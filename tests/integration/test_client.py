"""OrbitClient against a real gateway, with the decider, the dispatcher and a worker running.

One installation per test, every service in this process: what a user sees
from ``deploy`` to ``wait``, and the errors the gateway answers with.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from orbit_sdk import OrbitClient, OrbitClientError, TaskContext, Worker, task
from orbit_services.decider.service import DeciderService
from orbit_services.dispatcher.service import DispatcherService
from orbit_services.gateway import GatewayService

from .conftest import OrbitEnv

EXAMPLES = Path(__file__).parents[2] / "examples"


class GreetIn(BaseModel):
    name: str


class GreetOut(BaseModel):
    greeting: str


@task("greet", version="1")
async def greet(inp: GreetIn, ctx: TaskContext) -> GreetOut:
    await ctx.heartbeat()
    return GreetOut(greeting=f"hello, {inp.name}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
async def orbit(orbit_env: OrbitEnv) -> AsyncIterator[OrbitClient]:
    settings = orbit_env.settings_with(http_port=_free_port(), heartbeat_interval_ms=200)
    services = [GatewayService(settings), DeciderService(settings), DispatcherService(settings)]
    for service in services:
        await service.start()
    worker = Worker([greet], worker_id="greeter", settings=settings)
    await worker.start()
    client = OrbitClient(f"http://127.0.0.1:{settings.http_port}")
    try:
        yield client
    finally:
        await client.close()
        await worker.stop()
        for service in reversed(services):
            await service.stop()


async def test_deploy_start_and_wait_for_the_output(orbit: OrbitClient) -> None:
    [deployed] = await orbit.deploy(EXAMPLES / "hello-world.yaml")
    assert (deployed["name"], deployed["version"], deployed["created"]) == (
        "hello-world",
        "1.0.0",
        True,
    )
    [again] = await orbit.deploy(str(EXAMPLES / "hello-world.yaml"))
    assert again["created"] is False

    execution_id = f"hello-{uuid.uuid4().hex[:6]}"
    started = await orbit.start("hello-world", {"name": "ada"}, execution_id=execution_id)
    assert started == {"execution_id": execution_id, "created": True}
    repeated = await orbit.start("hello-world", {"name": "ada"}, execution_id=execution_id)
    assert repeated["created"] is False

    done = await orbit.wait(execution_id, timeout=20)
    assert done.status == "completed"
    assert done.output == {"greeting": "hello, ada"}
    assert (await orbit.get(execution_id)).steps["greet"].status == "succeeded"
    types = [entry["type"] for entry in await orbit.history(execution_id)]
    assert types[0] == "WorkflowCreated"
    assert "StepSucceeded" in types
    page = await orbit.list(workflow="hello-world", limit=10)
    assert [item.execution_id for item in page.items] == [execution_id]
    assert [d["name"] for d in await orbit.definitions()] == ["hello-world"]
    [worker] = await orbit.workers()
    assert (worker["worker_id"], worker["online"]) == ("greeter", True)


async def test_deploy_sends_children_before_their_parents(orbit: OrbitClient) -> None:
    # The directory lists order-fulfilment before send-invoice, its child.
    deployed = await orbit.deploy(EXAMPLES)
    names = [d["name"] for d in deployed]
    assert names.index("send-invoice") < names.index("order-fulfilment")
    assert sorted(names) == sorted(p.stem for p in EXAMPLES.glob("*.yaml"))


async def test_gateway_errors_carry_their_code_and_status(orbit: OrbitClient) -> None:
    with pytest.raises(OrbitClientError) as missing:
        await orbit.start("no-such-workflow")
    assert (missing.value.code, missing.value.status) == ("WORKFLOW_NOT_FOUND", 404)
    assert "no-such-workflow" in missing.value.message

    await orbit.deploy(EXAMPLES / "order-fulfilment.yaml", EXAMPLES / "send-invoice.yaml")
    with pytest.raises(OrbitClientError) as invalid:
        await orbit.start("order-fulfilment", {"order_id": 5})
    assert (invalid.value.code, invalid.value.status) == ("INVALID_INPUT", 400)

    with pytest.raises(OrbitClientError) as unknown:
        await orbit.get("nobody")
    assert unknown.value.status == 404


async def test_signal_query_cancel_and_a_wait_that_runs_out(orbit: OrbitClient) -> None:
    await orbit.deploy(EXAMPLES / "order-fulfilment.yaml", EXAMPLES / "send-invoice.yaml")
    started = await orbit.start(
        "order-fulfilment",
        {"order_id": "o-1", "items": [{"sku": "a"}], "callback_url": "http://example.invalid/"},
        execution_id="o-1",
    )
    execution_id: str = started["execution_id"]
    # No worker serves reserve-stock here: the execution waits.
    with pytest.raises(TimeoutError, match="still running"):
        await orbit.wait(execution_id, timeout=0.3)
    assert await orbit.query(execution_id, "charged") is False
    seq = await orbit.signal(execution_id, "approval", {"approved": True})
    assert seq > 1
    cancelled = await orbit.cancel(execution_id, "changed my mind")
    assert cancelled.execution_id == execution_id
    with pytest.raises(OrbitClientError) as bad_signal:
        await orbit.signal(execution_id, "approval", {"approved": "yes"})
    assert bad_signal.value.status in (409, 422)


async def test_an_unreachable_gateway_is_unavailable() -> None:
    async with OrbitClient(f"http://127.0.0.1:{_free_port()}", timeout=2) as client:
        with pytest.raises(OrbitClientError) as down:
            await client.definitions()
    assert (down.value.code, down.value.status) == ("UNAVAILABLE", 0)


async def test_start_with_wait_answers_with_the_ended_execution(orbit: OrbitClient) -> None:
    await orbit.deploy(EXAMPLES / "hello-world.yaml")
    started = await orbit.start("hello-world", {"name": "bo"}, execution_id="w-1", wait=True)
    assert (started["execution_id"], started["created"]) == ("w-1", True)
    assert started["execution"].status == "completed"
    assert started["execution"].output == {"greeting": "hello, bo"}
    again = await orbit.start("hello-world", {"name": "bo"}, execution_id="w-1", wait=True)
    assert again["created"] is False
    assert again["execution"].output == {"greeting": "hello, bo"}

    await orbit.deploy(EXAMPLES / "order-fulfilment.yaml", EXAMPLES / "send-invoice.yaml")
    order = {"order_id": "o-2", "items": [{"sku": "a"}], "callback_url": "http://example.invalid/"}
    with pytest.raises(TimeoutError, match="still running"):  # nobody serves reserve-stock
        await orbit.start(
            "order-fulfilment", order, execution_id="o-2", wait=True, wait_timeout=0.3
        )
    assert (await orbit.get("o-2")).status == "running"  # started all the same
