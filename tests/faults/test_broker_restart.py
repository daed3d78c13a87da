"""A RabbitMQ restart, or a crash of its node, never needs the services restarted.

Every consumer of every service (the decider's partitions, the gateway's
commands, the dispatcher's control queue, the workers' task queues and their
direct replies) is restored once the broker is back, and executions started
after it complete, as do those the outage caught in flight.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.views import view_json
from orbit_sdk import AmqpClient, TaskContext, task
from tests.e2e.stack import Stack, running_stack
from tests.integration.conftest import OrbitEnv

from .rabbitmq import PrivateRabbit

QUEUES_SETTLE_SECONDS = 15.0
"""How old RabbitMQ 3.10's quorum queues must be before a SIGKILL of a single node:
one declared a moment before it is not recovered on restart (its Ra member times
out on every consume, seen here). Production queues are long settled."""

ECHO = """
orbit: 1
workflow: echo
version: 1.0.0
tasks:
  echo: {version: "1"}
steps:
  - id: first
    task: echo
    input: {n: "${ input.n }"}
  - id: second
    task: echo
    input: {n: "${ steps.first.output.n }"}
"""


runs: Counter[str] = Counter()
"""The side effect outside Orbit: runs of each unit, by idempotency key."""


@task("echo", version="1")
async def echo(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    runs[ctx.idempotency_key] += 1
    # The executions started just before the broker goes are in flight while it is away.
    await asyncio.sleep(1.0 if ctx.execution_id.startswith("during") else 0.05)
    return {"n": inp["n"]}


@pytest.fixture
def rabbit(tmp_path: Path) -> Iterator[PrivateRabbit]:
    node = PrivateRabbit(tmp_path)
    node.start()
    try:
        yield node
    finally:
        node.stop()


async def _start_over_amqp(amqp: AmqpClient, execution_id: str, n: int) -> None:
    """A start by AMQP command, asked again while the gateway's consumer is not back yet."""
    deadline = time.monotonic() + 60
    while True:
        try:
            reply = await amqp.publish_start(
                "echo", {"n": n}, execution_id=execution_id, wait_reply=True
            )
        except OrbitError as error:  # no answer yet: the broker or the consumer is coming back
            if error.code != ErrorCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            continue
        assert reply is not None
        assert reply.ok, reply
        return


async def _run_all(stack: Stack, prefix: str, count: int, timeout: float = 60) -> None:
    """Start ``count`` executions over HTTP and over AMQP; every one completes."""
    ids = [f"{prefix}-{n}" for n in range(count)]
    half = count // 2
    for n, execution_id in enumerate(ids[:half]):
        await stack.client.start("echo", {"n": n}, execution_id=execution_id)
    async with AmqpClient(stack.settings, reply_timeout=5) as amqp:
        for n, execution_id in enumerate(ids[half:], start=half):
            await _start_over_amqp(amqp, execution_id, n)
    for n, execution_id in enumerate(ids):
        done = view_json(await stack.client.wait(execution_id, timeout=timeout))
        assert done["status"] == "completed", done
        assert done["output"] == {"n": n}


@pytest.mark.timeout(600)  # generous: only a failing run comes near it
@pytest.mark.parametrize("fault", ["restart", "kill"])
async def test_every_consumer_comes_back_after_the_broker_does(
    orbit_env: OrbitEnv, rabbit: PrivateRabbit, fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    runs.clear()
    caplog.set_level(logging.WARNING)
    settings = orbit_env.settings_with(amqp_url=rabbit.url)
    async with running_stack(settings, [echo]) as stack:
        declared = time.monotonic()
        await stack.client.deploy(ECHO)
        await _run_all(stack, "before", 10)
        if fault == "kill":
            await asyncio.sleep(max(0.0, declared + QUEUES_SETTLE_SECONDS - time.monotonic()))
        # In flight when the broker goes: started, then the broker is gone.
        for n in range(10):
            await stack.client.start("echo", {"n": n}, execution_id=f"during-{n}")
        caplog.clear()
        went = time.monotonic()
        if fault == "restart":
            await asyncio.to_thread(rabbit.restart_app)
        else:
            await asyncio.to_thread(rabbit.kill)
            await asyncio.to_thread(rabbit.start)
        back = time.monotonic()
        for n in range(10):
            try:
                done = view_json(await stack.client.wait(f"during-{n}", timeout=90))
            except TimeoutError as error:
                queues = await asyncio.to_thread(rabbit.queues)
                raise AssertionError(f"{error}; the broker's queues:\n{queues}") from None
            assert done["status"] == "completed", done
        caught = time.monotonic()
        outage_lines = _lines_by_action(caplog.records)
        try:
            await _run_all(stack, "after", 10)
        except (AssertionError, OrbitError, TimeoutError) as error:
            queues = await asyncio.to_thread(rabbit.queues)
            raise AssertionError(f"{error!r}; the broker's queues:\n{queues}") from error
    per_unit = sorted(Counter(runs.values()).items())
    print(
        f"broker {fault}: down and up in {back - went:.1f} s; the 10 executions in flight"
        f" completed {caught - back:.1f} s after; units by runs {per_unit};"
        f" warning lines while it was away, by action: {dict(outage_lines)}"
    )
    # Nothing lost, nothing run more than twice (a task in flight may run again). What
    # was logged meanwhile is printed, not counted: how many lines an outage gives
    # depends on how much was in flight, and so on the machine's speed
    # (tests/unit/test_logs.py checks the throttle that keeps them few).
    assert len(runs) == 2 * 30
    assert max(runs.values()) <= 2


def _lines_by_action(records: list[logging.LogRecord]) -> Counter[str]:
    """Orbit's own warnings and errors by action (the AMQP libraries log per connection)."""
    return Counter(
        f"{record.name}:{getattr(record, 'action', str(record.msg)[:40])}"
        for record in records
        if record.levelno >= logging.WARNING and record.name.startswith("orbit")
    )
