"""http: steps end to end: the decider dispatches them, the HTTP adapter service makes them.

The request goes to an aiohttp server on 127.0.0.1 that the test allows
(``ORBIT_HTTP_ALLOW_HOSTS``); the workflow's output reads the step's output.
A failing status and a forbidden destination come back as coded errors that
``continue_on_error`` hands to the workflow.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from orbit_model.views import view_json
from tests.integration.conftest import OrbitEnv

from .stack import running_stack

NOTIFY = """
orbit: 1
workflow: notify
version: 1.0.0
input:
  type: object
  required: [base, order]
  properties:
    base: {type: string}
    order: {type: string}
steps:
  - id: call
    http:
      method: POST
      url: ${ input.base + "/orders" }
      headers:
        x-order: ${ input.order }
      body:
        order: ${ input.order }
        items: [1, 2]
      timeout: 5s
  - id: missing
    http:
      url: ${ input.base + "/missing" }
    continue_on_error: true
  - id: metadata
    http:
      url: http://169.254.169.254/latest/meta-data/
    continue_on_error: true
output:
  status: ${ steps.call.output.status }
  received: ${ steps.call.output.body.received }
  missing: ${ steps.missing.output.error.code }
  metadata: ${ steps.metadata.output.error.code }
"""


async def orders(request: web.Request) -> web.Response:
    body = await request.json()
    received = {
        "order": body["order"],
        "items": body["items"],
        "header": request.headers["x-order"],
    }
    return web.json_response({"received": received}, status=201)


@pytest.fixture
async def server() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/orders", orders)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_an_http_step_s_output_reaches_the_workflow_output(
    orbit_env: OrbitEnv, server: str
) -> None:
    settings = orbit_env.settings_with(http_adapter_enabled=True, http_allow_hosts="127.0.0.1")
    services = ("decider", "dispatcher", "timer", "http-adapter", "gateway")
    async with running_stack(settings, services=services) as stack:
        client = stack.client
        await client.deploy(NOTIFY)
        await client.start("notify", {"base": server, "order": "o-7"}, execution_id="n-1")
        execution = view_json(await client.wait("n-1", timeout=30))
        workers = await client.workers()

    assert execution["status"] == "completed", execution
    assert execution["output"] == {
        "status": 201,
        "received": {"order": "o-7", "items": [1, 2], "header": "o-7"},
        "missing": "HTTP_404",
        "metadata": "HTTP_DESTINATION_FORBIDDEN",
    }
    steps = execution["steps"]
    assert steps["call"]["output"]["headers"]["content-type"].startswith("application/json")
    # Neither failure is retried: a 404 and a forbidden destination cannot get better.
    assert steps["missing"]["attempt"] == 1
    assert steps["metadata"]["attempt"] == 1
    [adapter] = [w for w in workers if w["worker_id"].startswith("orbit-http-adapter-")]
    assert adapter["runtime"] == "orbit"
    assert [(c["task"], c["version"]) for c in adapter["contracts"]] == [
        ("orbit.http.request", "1")
    ]
