"""Cancelling a running execution, and every limit with its code and status."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orbit_model.views import view_json
from orbit_sdk import OrbitClientError, TaskContext, task
from tests.integration.conftest import OrbitEnv
from tests.integration.eventually import eventually

from .stack import running_stack

CANCELLABLE = """
orbit: 1
workflow: cancellable
version: 1.0.0
tasks:
  step: {version: "1"}
  long: {version: "1"}
  undo: {version: "1"}
  cleanup: {version: "1"}
steps:
  - id: a
    task: step
    compensate: {task: undo, input: {undo: a}}
  - id: b
    task: step
    compensate: {task: undo, input: {undo: b}}
  - id: c
    task: long
finally:
  - id: tidy
    task: cleanup
"""

calls: list[str] = []


@task("step", version="1")
async def step(inp: Any, ctx: TaskContext) -> str:
    return ctx.unit


@task("long", version="1")
async def long(inp: Any, ctx: TaskContext) -> str:
    calls.append("long started")
    for _ in range(300):
        if ctx.cancelled.is_set():
            calls.append("long saw cancelled")
            return "stopped"
        await asyncio.sleep(0.05)
    return "never cancelled"


@task("undo", version="1")
async def undo(inp: dict[str, str], ctx: TaskContext) -> None:
    calls.append(f"undo {inp['undo']}")


@task("cleanup", version="1")
async def cleanup(inp: Any, ctx: TaskContext) -> None:
    calls.append("cleanup")


async def test_cancel_while_a_task_runs(orbit_env: OrbitEnv) -> None:
    calls.clear()
    settings = orbit_env.settings_with(heartbeat_interval_ms=100)
    async with running_stack(settings, [step, long, undo, cleanup]) as stack:
        client = stack.client
        await client.deploy(CANCELLABLE)
        await client.start("cancellable", None, execution_id="c-1")

        async def started() -> bool:
            return "long started" in calls

        await eventually(started, what="the long task")
        await client.cancel("c-1", "changed my mind")
        execution = view_json(await client.wait("c-1", timeout=20))
        await eventually(_saw_cancel, what="the task to see ctx.cancelled")
        history = [e["type"] for e in await client.history("c-1")]
    assert execution["status"] == "cancelled"
    steps = execution["steps"]
    assert steps["c"]["status"] == "cancelled"
    assert steps["tidy"]["status"] == "succeeded"
    # Newest first, then the cleanup.
    undos = [c for c in calls if c.startswith("undo") or c == "cleanup"]
    assert undos == ["undo b", "undo a", "cleanup"]
    # The cancelled task's own late answer comes after the end, recorded as stale.
    assert "WorkflowCancelled" in history
    after_end = history[history.index("WorkflowCancelled") + 1 :]
    assert set(after_end) <= {"StaleResultIgnored"}


async def _saw_cancel() -> bool:
    return "long saw cancelled" in calls


FAN = """
orbit: 1
workflow: fan
version: 1.0.0
input: {type: object, properties: {items: {type: array}}}
tasks:
  echo: {version: "1"}
steps:
  - id: each
    for: ${ input.items }
    task: echo
    input: {i: "${ item }"}
"""

BIG = """
orbit: 1
workflow: big
version: 1.0.0
tasks:
  big: {version: "1"}
steps:
  - id: b
    task: big
    retry: {max_attempts: 1}
"""

WAITS = """
orbit: 1
workflow: waits
version: 1.0.0
signals: {go: {}}
steps:
  - id: w
    await: go
"""


@task("echo", version="1")
async def echo(inp: dict[str, Any], ctx: TaskContext) -> Any:
    return inp["i"]


@task("big", version="1")
async def big(inp: Any, ctx: TaskContext) -> str:
    return "x" * 5000


async def test_every_limit_with_its_code_and_status(orbit_env: OrbitEnv) -> None:
    settings = orbit_env.settings_with(
        max_fan_out=5, max_history_events=15, max_payload_bytes=1000, max_active_executions=3
    )
    async with running_stack(settings, [echo, big]) as stack:
        client = stack.client
        await client.deploy(
            FAN.replace(
                "range(input.n)",
                "input.n == 0 ? [] : [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11].slice(0, input.n)",
            ),
            BIG,
            WAITS,
        )
        # MAX_FAN_OUT: 6 elements where 5 are allowed.
        await client.start("fan", {"items": list(range(6))}, execution_id="l-fan")
        fan = view_json(await client.wait("l-fan", timeout=20))
        assert fan["status"] == "failed"
        assert fan["steps"]["each"]["error"]["code"] == "LIMIT_EXCEEDED"
        # MAX_PAYLOAD_BYTES on a result: the attempt fails, not the service.
        await client.start("big", None, execution_id="l-big")
        result = view_json(await client.wait("l-big", timeout=20))
        assert result["steps"]["b"]["error"]["code"] == "PAYLOAD_TOO_LARGE"
        # MAX_HISTORY_EVENTS: 5 elements fit the fan-out, not the history.
        await client.start("fan", {"items": list(range(5))}, execution_id="l-history")
        history = view_json(await client.wait("l-history", timeout=20))
        assert history["status"] == "failed"
        assert history["error"]["code"] == "LIMIT_EXCEEDED"
        # MAX_PAYLOAD_BYTES on an input and a signal: 413 before anything is stored.
        with pytest.raises(OrbitClientError) as too_large:
            await client.start("waits", {"blob": "x" * 2000})
        assert (too_large.value.code, too_large.value.status) == ("PAYLOAD_TOO_LARGE", 413)
        await client.start("waits", None, execution_id="l-wait-1")
        with pytest.raises(OrbitClientError) as signal_too_large:
            await client.signal("l-wait-1", "go", "x" * 2000)
        assert (signal_too_large.value.code, signal_too_large.value.status) == (
            "PAYLOAD_TOO_LARGE",
            413,
        )
        # MAX_ACTIVE_EXECUTIONS: three may run at once.
        for n in (2, 3):
            await client.start("waits", None, execution_id=f"l-wait-{n}")
        with pytest.raises(OrbitClientError) as exhausted:
            await client.start("waits", None, execution_id="l-wait-4")
        assert (exhausted.value.code, exhausted.value.status) == ("RESOURCE_EXHAUSTED", 429)


FAN_OF_FANS = """
orbit: 1
workflow: fan-of-fans
version: 1.0.0
input: {type: object, properties: {children: {type: array}, items: {type: array}}}
steps:
  - id: each
    for: ${ input.children }
    workflow: fan@1.0.0
    input: {items: "${ input.items }"}
    concurrency: 1
"""


async def test_the_fan_out_limit_bounds_a_tree_of_child_workflows(orbit_env: OrbitEnv) -> None:
    # Each child's for is within the limit; together, with their parent's, they are not.
    settings = orbit_env.settings_with(max_fan_out=10)
    async with running_stack(settings, [echo]) as stack:
        client = stack.client
        await client.deploy(FAN, FAN_OF_FANS)
        # 2 + 2 x 4: within 10, each child given back what it did not use.
        await client.start(
            "fan-of-fans", {"children": [0, 1], "items": [0, 1, 2, 3]}, execution_id="t-fits"
        )
        fits = view_json(await client.wait("t-fits", timeout=60))
        assert fits["status"] == "completed"
        assert fits["output"] == [[0, 1, 2, 3], [0, 1, 2, 3]]
        # 3 + 3 x 3: the third child has 1 left of the 10, and is refused its for.
        await client.start(
            "fan-of-fans", {"children": [0, 1, 2], "items": [0, 1, 2]}, execution_id="t-past"
        )
        past = view_json(await client.wait("t-past", timeout=60))
        assert past["status"] == "failed"
        error = past["steps"]["each"]["error"]
        assert error["code"] == "CHILD_FAILED"
        assert "fan-out left to this execution: 1 of the 1 its parent gave it" in str(error)
        first, third = (
            view_json(await client.get("t-past:each.0")),
            view_json(await client.get("t-past:each.2")),
        )
        assert first["status"] == "completed"
        assert third["status"] == "failed"
        assert third["steps"]["each"]["error"]["code"] == "LIMIT_EXCEEDED"
