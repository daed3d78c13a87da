"""The console's pages of a huge definition neither hold up other requests nor draw without
bound (issue 31, item 1).

The definition of the finding: each step comes after every earlier one, so its edges
grow with the square of the steps and the waypoints a graph would route them through
with the cube. Unbounded, 100 such steps took the gateway about 10 s per page (140: 23 s;
440: 3 GB, then ``MemoryError``), on the event loop every request shares, and a running
execution's page asks for itself every second. Now the graph gives way to a table past
the layout's bounds (``tests/unit/test_console_graph_bounds.py``), and the pages are
drawn off the loop: while they load, another client's ``GET /v1/executions`` is
answered all along.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from .conftest import OrbitEnv
from .test_gateway import YAML, Gateway, running

STEPS = 100
"""Dense steps: 4,950 edges, 161,700 waypoints unbounded."""
LOADS = 3
"""Loads of each page."""
PROBE_BOUND = 5.0
"""The longest another client's request may wait while the pages load: generous for a
busy machine (it takes milliseconds), and far below the stall it reproduces."""


@pytest.fixture
async def gateway(orbit_env: OrbitEnv) -> AsyncIterator[Gateway]:
    async with running(orbit_env, orbit_env.settings) as found:
        yield found


def dense(steps: int) -> str:
    lines = ["orbit: 1", "workflow: dense", "version: 1.0.0", "steps:"]
    for index in range(steps):
        lines += [f"  - id: s{index}", "    sleep: 1s"]
        lines.append("    after: [" + ", ".join(f"s{j}" for j in range(index)) + "]")
    return "\n".join(lines) + "\n"


async def test_a_dense_definition_s_pages_do_not_hold_up_other_requests(
    gateway: Gateway,
) -> None:
    client = gateway.client
    registered = await client.post("/v1/definitions", content=dense(STEPS), headers=YAML)
    assert registered.status_code == 201, registered.text
    execution_id = await gateway.start("dense")
    pages = ["/ui/definitions/dense/1.0.0", f"/ui/executions/{execution_id}"] * LOADS
    took: list[float] = []
    waits: list[float] = []
    answers: list[httpx.Response] = []
    loaded = asyncio.Event()

    async def load() -> None:
        for page in pages:
            started = time.monotonic()
            response = await client.get(page, headers={"accept": "text/html"})
            took.append(time.monotonic() - started)
            answers.append(response)
        loaded.set()

    async def probe() -> None:
        while not loaded.is_set():
            # Timed from before the pause, so that a stall during the pause counts too.
            started = time.monotonic()
            await asyncio.sleep(0.02)
            response = await client.get("/v1/executions")
            waits.append(time.monotonic() - started)
            assert response.status_code == 200

    await asyncio.gather(load(), probe())
    print(f"pages: {max(took):.3f} s at most; other requests: {max(waits):.3f} s at most")
    assert max(waits) < PROBE_BOUND
    for answer in answers:
        assert answer.status_code == 200, answer.text[:500]
        assert "The step graph is not drawn: dense has 4,950 edges" in answer.text


def long_definition(version: int, lines: int) -> str:
    """A definition of ``lines`` lines more, its description's: every other line the same
    in each version, the lines between them short and different, which is what makes a
    line diff's work grow with the square of the lines."""
    text = []
    for index in range(lines // 2):
        text += [f"  step {index}", f"  sleeps {index * (3 + version) % 9 + 1}s"]
    head = ["orbit: 1", "workflow: long", f"version: {version}.0.0", "description: |", *text]
    return "\n".join([*head, "steps:", "  - id: nap", "    sleep: 1s"]) + "\n"


async def test_a_diff_of_long_definitions_does_not_hold_up_other_requests(
    gateway: Gateway,
) -> None:
    """Two versions of 8,000 lines: the diff took 8 s on the loop (40,000: 86 s); now the
    page says they are too long to compare here, and draws off the loop."""
    client = gateway.client
    for version in (1, 2):
        body = long_definition(version, 8_000)
        registered = await client.post("/v1/definitions", content=body, headers=YAML)
        assert registered.status_code == 201, registered.text
    answers: list[httpx.Response] = []
    waits: list[float] = []

    async def load() -> None:
        for _ in range(LOADS):
            page = "/ui/definitions/long/2.0.0?diff=1.0.0"
            answers.append(await client.get(page, headers={"accept": "text/html"}))

    async def probe(loading: asyncio.Task[None]) -> None:
        while not loading.done():
            # Timed from before the pause, so that a stall during the pause counts too.
            started = time.monotonic()
            await asyncio.sleep(0.02)
            response = await client.get("/v1/executions")
            waits.append(time.monotonic() - started)
            assert response.status_code == 200

    loading = asyncio.create_task(load())
    await asyncio.gather(loading, probe(loading))
    print(f"other requests: {max(waits):.3f} s at most")
    assert max(waits) < PROBE_BOUND
    for answer in answers:
        assert answer.status_code == 200, answer.text[:500]
        assert "Not compared here: long@1.0.0 or long@2.0.0 has 8," in answer.text
