"""OrbitClient's requests and error parsing, against a tiny stand-in app (no gateway needed).

The real gateway is exercised in ``tests/integration/test_client.py``; here
are the corners it never shows: answers without an Orbit error body, a
``wait`` that takes several requests, and deploy ordering refusals.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request, Response

from orbit_model import DefinitionError
from orbit_sdk import OrbitClient, OrbitClientError

EXAMPLES = Path(__file__).parents[2] / "examples"


def _app(calls: list[dict[str, Any]]) -> FastAPI:
    app = FastAPI()
    polls = {"count": 0}

    @app.post("/v1/definitions")
    async def register(request: Request) -> dict[str, Any]:
        body = (await request.body()).decode()
        calls.append({"content_type": request.headers["content-type"], "body": body})
        name = next(line for line in body.splitlines() if line.startswith("workflow:"))
        return {"name": name.split(":", 1)[1].strip(), "created": True}

    @app.get("/v1/executions/{execution_id}")
    async def get(execution_id: str, wait: float | None = None) -> dict[str, Any]:
        calls.append({"wait": wait})
        polls["count"] += 1
        status = "completed" if polls["count"] >= 3 else "running"
        return {
            "execution_id": execution_id,
            "workflow": "w",
            "version": "1",
            "status": status,
            "parent": None,
            "created_at": "2026-05-01T12:00:00+00:00",
            "closed_at": None,
            "input": None,
            "output": None,
            "error": None,
            "steps": {},
            "waiting_for": [],
            "lost_messages": [],
        }

    @app.get("/v1/workers")
    async def broken() -> Response:
        return Response("upstream exploded", status_code=502, media_type="text/plain")

    return app


@pytest.fixture
def calls() -> list[dict[str, Any]]:
    return []


@pytest.fixture
async def client(calls: list[dict[str, Any]]) -> AsyncIterator[OrbitClient]:
    transport = httpx.ASGITransport(app=_app(calls))
    async with OrbitClient("http://orbit.test", transport=transport) as client:
        yield client


async def test_deploy_sends_yaml_children_first(
    client: OrbitClient, calls: list[dict[str, Any]]
) -> None:
    parent = (EXAMPLES / "order-fulfilment.yaml").read_text()
    child = (EXAMPLES / "send-invoice.yaml").read_text()
    deployed = await client.deploy(parent, child)
    assert [d["name"] for d in deployed] == ["send-invoice", "order-fulfilment"]
    assert {c["content_type"] for c in calls} == {"application/yaml"}
    assert calls[0]["body"] == child


async def test_wait_polls_until_the_execution_ends(
    client: OrbitClient, calls: list[dict[str, Any]]
) -> None:
    done = await client.wait("e-1", timeout=5)
    assert done.status == "completed"
    assert len(calls) == 3
    assert all(0 < call["wait"] <= 5 for call in calls)


async def test_an_error_without_an_orbit_body_keeps_its_status(client: OrbitClient) -> None:
    with pytest.raises(OrbitClientError) as failed:
        await client.workers()
    assert (failed.value.code, failed.value.status) == ("HTTP_502", 502)
    assert failed.value.message == "upstream exploded"


async def test_a_file_that_does_not_compile_is_not_sent(
    client: OrbitClient, calls: list[dict[str, Any]], tmp_path: Path
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("orbit: 1\nworkflow: x\n")
    with pytest.raises(DefinitionError):
        await client.deploy(EXAMPLES / "hello-world.yaml", broken)
    assert calls == []
