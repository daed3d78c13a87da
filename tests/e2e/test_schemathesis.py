"""Schemathesis over the gateway's own ``/openapi.json``: every operation, fed requests
made from the document (valid and invalid), answers without a server error and as the
document says (status, content type, headers, body).

The gateway is the one that runs in production (uvicorn on a port, over the test's
own Postgres database and RabbitMQ namespace), with a decider, the timer, the
dispatcher and a worker for the examples, so that reads find real executions: the
ids and names Schemathesis draws are often theirs (``schemathesis.toml`` beside this
file, which also bounds the run and makes it deterministic).

Schemathesis runs as its command line, the way CI would run it against a deployed
gateway: its pytest plugin's fixture-loaded schemas do not run under pytest 9.2
(they read ``Function._nodeid``, which pytest 9.2 removed), and its in-process ASGI
transport would call the app from an event loop of its own, away from the one that
holds Orbit's Postgres pool and RabbitMQ connection.
"""

from __future__ import annotations

import asyncio
import sys
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest

from examples.workers import TASKS
from tests.integration.conftest import OrbitEnv
from tests.integration.eventually import eventually

from .stack import Stack, running_stack

EXAMPLES = Path(__file__).parents[2] / "examples"
WORKFLOWS = ("hello-world", "fan-out", "send-invoice", "order-fulfilment")
"""The examples registered (a child before its parent)."""
CONFIG = Path(__file__).with_name("schemathesis.toml")
SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
RUN_SECONDS = 180
WAIT_CUT_SECONDS = 2.0
"""``ORBIT_MAX_WAIT_SECONDS`` of the gateway under test: well inside Schemathesis's
10 s request timeout."""

HELLO_DONE = "hello-done"
"""Completed (a worker greets)."""
ORDER_WAITING = "order-waiting"
"""Stock reserved, waiting for its ``approval`` signal."""
ORDER_DOOMED = "order-doomed"
"""As ``order-waiting``, for Schemathesis to cancel."""
INBOX_OPEN = "inbox-open"
"""Takes any number of notes (any JSON payload): signals that are recorded."""
DOOMED_TOKEN = "doomed-token"
"""An API token for Schemathesis to revoke."""
ORDER_INPUT = {"order_id": "o-1", "items": [{"sku": "book"}], "callback_url": "http://127.0.0.1:9/"}
INBOX = """\
orbit: 1
workflow: inbox
version: 1.0.0
description: Takes notes, of any JSON, until it is closed.
signals:
  note: {}
  close: {type: object, required: [really], properties: {really: {const: true}}}
queries:
  open: ${ steps.closed.status != "succeeded" }
steps:
  - id: closed
    await: close
"""


def auth_headers(stack: Stack) -> dict[str, str]:
    """The headers of every request this test sends to ``stack``'s gateway: its admin
    API token (the gateway runs with auth on, as in production)."""
    assert stack.token is not None
    return {"Authorization": f"Bearer {stack.token}"}


async def _seed(url: str, headers: dict[str, str]) -> None:
    """Register the workflows, and make the executions and the token the run's
    dictionaries name."""
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:

        async def call(method: str, path: str, **kwargs: Any) -> Any:
            response = await client.request(method, path, **kwargs)
            assert response.is_success, f"{method} {path}: {response.text}"
            return response.json()

        yaml = {"content-type": "application/yaml"}
        examples = [(EXAMPLES / f"{name}.yaml").read_text() for name in WORKFLOWS]
        for text in (*examples, INBOX):
            await call("POST", "/v1/definitions", content=text, headers=yaml)
        token = {"name": DOOMED_TOKEN, "scopes": ["executions:read"]}
        await call("POST", "/v1/tokens", json=token)
        starts = [
            ("hello-world", HELLO_DONE, {"name": "ada"}),
            ("order-fulfilment", ORDER_WAITING, ORDER_INPUT),
            ("order-fulfilment", ORDER_DOOMED, ORDER_INPUT),
            ("inbox", INBOX_OPEN, None),
        ]
        for workflow, execution_id, body in starts:
            start = {"workflow": workflow, "execution_id": execution_id, "input": body}
            await call("POST", "/v1/executions", json=start)
        done = await call("GET", f"/v1/executions/{HELLO_DONE}", params={"wait": "30"})
        assert done["status"] == "completed", done
        awaits = {ORDER_WAITING: "approval", ORDER_DOOMED: "approval", INBOX_OPEN: "closed"}
        for execution_id, step in awaits.items():
            await eventually(
                lambda execution_id=execution_id: call("GET", f"/v1/executions/{execution_id}"),
                lambda view, step=step: [wait["step"] for wait in view["waiting_for"]] == [step],
                timeout=60,
                interval=0.05,
                what=f"{execution_id} waiting at {step}",
            )


def test_the_dictionaries_name_what_the_test_makes() -> None:
    dictionaries = tomllib.loads(CONFIG.read_text())["dictionaries"]
    executions = {HELLO_DONE, ORDER_WAITING, ORDER_DOOMED, INBOX_OPEN}
    for name in ("executions", "cancellable", "waiting"):
        assert set(dictionaries[name]["values"]) <= executions
    assert set(dictionaries["workflows"]["values"]) == {*WORKFLOWS, "inbox"}
    assert dictionaries["revocable"]["values"] == [DOOMED_TOKEN]


@pytest.mark.timeout(RUN_SECONDS + 60)
async def test_schemathesis_finds_no_server_error_and_no_schema_violation(
    orbit_env: OrbitEnv, tmp_path: Path
) -> None:
    # A wait the run draws on a running execution (its dictionary is not used for every
    # case) is answered within the run's request timeout, as the setting says.
    settings = orbit_env.settings_with(auth="tokens", max_wait_seconds=WAIT_CUT_SECONDS)
    async with running_stack(settings, tasks=TASKS) as stack:
        url = f"http://127.0.0.1:{stack.settings.http_port}"
        headers = auth_headers(stack)
        await _seed(url, headers)
        process = await asyncio.create_subprocess_exec(
            str(SCHEMATHESIS),
            f"--config-file={CONFIG}",
            "--no-color",
            "run",
            f"{url}/openapi.json",
            *(f"--header={name}: {value}" for name, value in headers.items()),
            cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            output, _ = await asyncio.wait_for(process.communicate(), RUN_SECONDS)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    report = output.decode(errors="replace")
    print(report)  # shown by `pytest -rP`: what was tested, and the warnings
    assert process.returncode == 0, report
