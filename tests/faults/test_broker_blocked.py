"""A blocked or frozen RabbitMQ: the gateway answers every start within its bound.

A chaos run raised a memory alarm, a disk alarm, and froze a node with SIGSTOP for
25-30 s (issue 32, item 7): about 40% of starts waited past the client's 10 s
timeout, each already committed, since the request awaited the broker's confirm of
its outbox publish without a bound. Here a private node (:mod:`.rabbitmq`) is
blocked by a memory alarm, then a disk alarm, then frozen, each for longer than any
bound, while a client starts executions: each start is answered 201 within
``ORBIT_BROKER_REQUEST_TIMEOUT_SECONDS`` and a margin for a busy machine (it was
committed: the outbox sweep publishes its message once the broker takes messages
again), and every execution completes afterwards, with nothing restarted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from orbit_model.views import view_json
from tests.e2e.stack import running_stack
from tests.integration.conftest import OrbitEnv

from .rabbitmq import PrivateRabbit
from .workflows import ONE_STEP_YAML, echo

BROKER_TIMEOUT = 1.0
"""The gateway's ``ORBIT_BROKER_REQUEST_TIMEOUT_SECONDS`` here (2 s by default)."""
ANSWER_BOUND = BROKER_TIMEOUT + 8.0
"""The longest a start may wait for its answer: the bounded publish, the statements,
and a margin for a busy machine."""
BLOCKED_SECONDS = 3 * ANSWER_BOUND
"""Long enough that a start held for the whole fault could not pass for answered."""
STARTS = 10
RECOVERY_TIMEOUT = 180.0
"""Seconds for every execution to complete once the broker is back: the sweep's grace
(5 s) and a few steps; generous, for a loaded machine."""


@pytest.fixture
def rabbit(tmp_path: Path) -> Iterator[PrivateRabbit]:
    node = PrivateRabbit(tmp_path)
    node.start()
    try:
        yield node
    finally:
        node.stop()


async def _starts_while(
    http: httpx.AsyncClient, label: str, fault: Callable[[], None]
) -> list[tuple[float, httpx.Response | str]]:
    """Start :data:`STARTS` executions ``LABEL-N`` at once, ``fault`` under way; each
    answer with how long it took."""

    async def start(n: int) -> tuple[float, httpx.Response | str]:
        body = {"workflow": "one-step", "input": {"n": n}, "execution_id": f"{label}-{n}"}
        began = time.monotonic()
        try:
            response = await http.post("/v1/executions", json=body)
            return time.monotonic() - began, response
        except httpx.HTTPError as error:
            return time.monotonic() - began, repr(error)

    await asyncio.to_thread(fault)
    began = time.monotonic()
    answers = await asyncio.gather(*(start(n) for n in range(STARTS)))
    assert time.monotonic() - began < BLOCKED_SECONDS  # answered during the fault
    return list(answers)


def _check(answers: list[tuple[float, httpx.Response | str]]) -> None:
    slowest = max(took for took, _ in answers)
    print(f"{len(answers)} starts during the fault, the slowest answered in {slowest:.2f} s")
    for took, response in answers:
        assert isinstance(response, httpx.Response), response
        assert response.status_code == 201, response.text
        assert took < ANSWER_BOUND, f"{took:.1f} s"


@pytest.mark.timeout(900)  # generous: only a failing run comes near it
async def test_a_blocked_or_frozen_broker_gets_every_start_answered_in_time(
    orbit_env: OrbitEnv, rabbit: PrivateRabbit
) -> None:
    settings = orbit_env.settings_with(
        amqp_url=rabbit.url, broker_request_timeout_seconds=BROKER_TIMEOUT
    )
    async with running_stack(settings, [echo]) as stack:
        headers = {"authorization": f"Bearer {stack.token}"} if stack.token else {}
        async with httpx.AsyncClient(
            base_url=stack.client.url, headers=headers, timeout=BLOCKED_SECONDS * 2
        ) as http:
            await stack.client.deploy(ONE_STEP_YAML)
            await stack.client.start("one-step", {"n": -1}, execution_id="before", wait=True)
            # A memory alarm: RabbitMQ blocks every publishing connection.
            try:
                blocked = await _starts_while(http, "alarm", rabbit.raise_memory_alarm)
            finally:
                await asyncio.to_thread(rabbit.clear_memory_alarm)
            _check(blocked)
            # A disk alarm: the same, for want of free disk.
            try:
                short = await _starts_while(http, "disk", rabbit.raise_disk_alarm)
            finally:
                await asyncio.to_thread(rabbit.clear_disk_alarm)
            _check(short)
            # A frozen node: its connections stay open, and nothing answers.
            try:
                frozen = await _starts_while(http, "frozen", rabbit.freeze)
            finally:
                await asyncio.to_thread(rabbit.thaw)
            _check(frozen)
        for label in ("alarm", "disk", "frozen"):
            for n in range(STARTS):
                done = view_json(await stack.client.wait(f"{label}-{n}", timeout=RECOVERY_TIMEOUT))
                assert (done["status"], done["output"]) == ("completed", {"n": n})
