"""Every timeout kind, for real: step, queue, heartbeat and workflow, in milliseconds."""

from __future__ import annotations

import asyncio
from typing import Any

from orbit_model.views import view_json
from orbit_sdk import TaskContext, task
from tests.integration.conftest import OrbitEnv
from tests.integration.eventually import eventually

from .stack import running_stack

WORKFLOW = """
orbit: 1
workflow: timeouts
version: 1.0.0
input: {type: object, required: [case], properties: {case: {type: string}}}
tasks:
  work: {version: "1"}
  nobody-serves-this: {version: "1"}
defaults:
  retry: {max_attempts: 1}
steps:
  - id: slow
    if: ${ input.case == "step" }
    task: work
    input: {seconds: 3, beat: false}
    timeout: 300ms
  - id: queued
    if: ${ input.case == "queue" }
    task: nobody-serves-this
    schedule_timeout: 300ms
    after: []
  - id: beating
    if: ${ input.case == "beating" }
    task: work
    input: {seconds: 1.5, beat: true}
    heartbeat_timeout: 3s
    after: []
  - id: silent
    if: ${ input.case == "silent" }
    task: work
    input: {seconds: 60, beat: false}
    heartbeat_timeout: 3s
    after: []
"""
# The heartbeat timeouts are 30 beats (one per 100 ms) long: a loaded machine may hold
# a beat up for a second or two, and the beating task must not time out for that. The
# silent one is stopped when its timeout fires, long before its 60 s are up.

TIMED = """
orbit: 1
workflow: timed
version: 1.0.0
timeout: 500ms
steps:
  - id: nap
    sleep: 5s
"""

cancelled_tokens: list[str] = []


@task("work", version="1")
async def work(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    end = loop.time() + inp["seconds"]
    while loop.time() < end:
        if ctx.cancelled.is_set():
            cancelled_tokens.append(ctx.token)
            return {"stopped": True}
        if inp["beat"]:
            await ctx.heartbeat()
        await asyncio.sleep(0.1)
    return {"done": True}


async def test_each_timeout_fires_with_its_code(orbit_env: OrbitEnv) -> None:
    settings = orbit_env.settings_with(heartbeat_interval_ms=100)
    async with running_stack(settings, [work]) as stack:
        client = stack.client
        await client.deploy(WORKFLOW, TIMED)
        for case in ("step", "queue", "beating", "silent"):
            await client.start("timeouts", {"case": case}, execution_id=f"t-{case}")
        await client.start("timed", None, execution_id="t-workflow")
        results = {
            case: view_json(await client.wait(f"t-{case}", timeout=60))
            for case in ("step", "queue", "beating", "silent", "workflow")
        }

        # The silent task is told to stop at its next session heartbeat.
        async def told() -> bool:
            return _delivery("t-silent:silent:1", cancelled_tokens)

        await eventually(told, timeout=30, what="the silent task told to stop")

    def code(case: str, step: str) -> str:
        return str(results[case]["steps"][step]["error"]["code"])

    assert results["step"]["status"] == "failed"
    assert code("step", "slow") == "TIMEOUT"
    assert results["queue"]["status"] == "failed"
    assert code("queue", "queued") == "SCHEDULE_TIMEOUT"
    assert results["beating"]["status"] == "completed"
    assert results["beating"]["steps"]["beating"]["output"] == {"done": True}
    assert results["silent"]["status"] == "failed"
    assert code("silent", "silent") == "HEARTBEAT_TIMEOUT"
    assert _delivery("t-silent:silent:1", cancelled_tokens)
    assert results["workflow"]["status"] == "timed_out"


def _delivery(issued_as: str, tokens: list[str]) -> bool:
    """Whether ``tokens`` holds the delivery ``EXECUTION:UNIT:N`` (a token has a MAC after
    a dot: orbit_model.attempts.delivery_token)."""
    return any(token.partition(".")[0] == issued_as for token in tokens)
