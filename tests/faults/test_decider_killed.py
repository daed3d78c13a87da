"""The decider killed with SIGKILL, then stopped with SIGTERM, in the middle of 200 executions.

The decider runs as its own process (``python -m orbit_sdk service decider``);
the gateway, dispatcher, timer and a worker run in the test. Whatever the
decider held when it died was not acked, so RabbitMQ hands it to the new
process; whatever it had committed but not published is in the outbox,
which the new process relays. Every execution completes, and every step
succeeds exactly once.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from typing import Any

import pytest

from orbit_model.events import StepSucceeded, WorkflowCompleted
from orbit_sdk import TaskContext, task
from orbit_services.store import EventStore
from tests.e2e.stack import running_stack
from tests.integration.conftest import OrbitEnv
from tests.integration.eventually import eventually

from .processes import orbit_process
from .workflows import THREE_STEPS_YAML

EXECUTIONS = 200
START_WITHIN = 120.0
"""Seconds for a decider process to start deciding: Python's start takes seconds on a
loaded machine; only one that never comes waits this long."""
DONE_WITHIN = 300.0
"""Seconds for the rest to complete: a few on an idle machine; generous, for a loaded one."""


@task("greet", version="1")
async def greet(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    return {"greeting": f"hi {inp['name']}"[:40]}


@pytest.mark.timeout(900)  # generous: only a failing run comes near it
async def test_a_killed_decider_loses_nothing_and_repeats_nothing(orbit_env: OrbitEnv) -> None:
    settings = orbit_env.settings
    decider = await orbit_process(settings, "service", "decider")
    store = await EventStore.connect(settings.database_url)
    try:
        async with running_stack(
            settings, [greet], services=("dispatcher", "timer", "gateway")
        ) as stack:
            client = stack.client
            await client.deploy(THREE_STEPS_YAML)
            ids = [f"k-{n}" for n in range(EXECUTIONS)]
            await asyncio.gather(
                *(client.start("three-steps", {"name": i}, execution_id=i) for i in ids)
            )

            async def completed() -> int:
                return len(await store.list_executions(status="completed", limit=EXECUTIONS))

            # Kill it mid-run: some executions done, most not.
            await eventually(
                completed, lambda n: n >= 10, timeout=START_WITHIN, what="a first completion"
            )
            decider.send_signal(signal.SIGKILL)
            await decider.wait()
            assert await completed() < EXECUTIONS
            decider = await orbit_process(settings, "service", "decider")
            # Then a graceful stop mid-run: it finishes its batch, exits 0, loses nothing.
            before = await completed()
            await eventually(completed, lambda n: n > before, timeout=START_WITHIN, what="progress")
            decider.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(decider.wait(), timeout=START_WITHIN) == 0
            decider = await orbit_process(settings, "service", "decider")
            await eventually(
                completed, lambda n: n == EXECUTIONS, timeout=DONE_WITHIN, what="every completion"
            )
        for execution_id in ids:
            stored = await store.read_events(execution_id)
            assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
            events = [e.event for e in stored]
            succeeded = Counter(e.unit for e in events if isinstance(e, StepSucceeded))
            assert succeeded == {"a": 1, "b": 1, "c": 1}, execution_id
            assert sum(isinstance(e, WorkflowCompleted) for e in events) == 1
    finally:
        if decider.returncode is None:
            decider.send_signal(signal.SIGTERM)
            await decider.wait()
        await store.close()
