"""Child workflows end to end: one that succeeds, one that fails, one cancelled with its parent."""

from __future__ import annotations

from typing import Any

from orbit_sdk import TaskContext, TaskError, task
from tests.integration.conftest import OrbitEnv
from tests.integration.eventually import eventually

from .stack import running_stack

CHILD = """
orbit: 1
workflow: child
version: 1.0.0
input: {type: object, required: [mode], properties: {mode: {type: string}}}
signals: {never: {}}
tasks:
  work: {version: "1"}
steps:
  - id: work
    if: ${ input.mode != "wait" }
    task: work
    input: {mode: "${ input.mode }"}
    retry: {max_attempts: 1}
  - id: hold
    if: ${ input.mode == "wait" }
    await: never
    after: []
output:
  done: ${ steps.work.output }
"""

PARENT = """
orbit: 1
workflow: parent
version: 1.0.0
input: {type: object, required: [mode], properties: {mode: {type: string}}}
tasks:
  undo: {version: "1"}
steps:
  - id: kid
    workflow: child@1.0.0
    input: {mode: "${ input.mode }"}
    compensate: {task: undo}
output: ${ steps.kid.output }
"""


@task("work", version="1")
async def work(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    if inp["mode"] == "fail":
        raise TaskError("BROKEN", "the child broke", retryable=False)
    return {"by": ctx.execution_id}


@task("undo", version="1")
async def undo(inp: Any, ctx: TaskContext) -> None:
    return None


async def test_children_succeed_fail_and_are_cancelled_with_their_parent(
    orbit_env: OrbitEnv,
) -> None:
    async with running_stack(orbit_env.settings, [work, undo]) as stack:
        client = stack.client
        await client.deploy(PARENT, CHILD)  # the client sends the child first
        for mode in ("ok", "fail", "wait"):
            await client.start("parent", {"mode": mode}, execution_id=f"p-{mode}")

        ok = await client.wait("p-ok", timeout=20)
        assert ok["status"] == "completed"
        assert ok["output"] == {"done": {"by": "p-ok:kid"}}
        child = await client.get("p-ok:kid")
        assert (child["status"], child["parent"]) == ("completed", "p-ok:kid")

        failed = await client.wait("p-fail", timeout=20)
        assert failed["status"] == "failed"
        error = failed["steps"]["kid"]["error"]
        assert error["code"] == "CHILD_FAILED"
        assert error["details"]["child_execution_id"] == "p-fail:kid"
        assert error["details"]["error"]["code"] == "BROKEN"
        assert (await client.get("p-fail:kid"))["status"] == "failed"

        async def child_status() -> str:
            try:
                return str((await client.get("p-wait:kid"))["status"])
            except Exception:
                return "missing"

        await eventually(child_status, lambda s: s == "running", what="the waiting child")
        await client.cancel("p-wait", "no longer needed")
        cancelled = await client.wait("p-wait", timeout=20)
        assert cancelled["status"] == "cancelled"
        assert cancelled["steps"]["kid"]["status"] == "cancelled"
        child = await client.wait("p-wait:kid", timeout=20)
        assert child["status"] == "cancelled"


async def test_an_execution_that_took_the_child_id_is_left_alone(orbit_env: OrbitEnv) -> None:
    async with running_stack(orbit_env.settings, [work, undo]) as stack:
        client = stack.client
        await client.deploy(PARENT, CHILD)
        # Someone started an execution under the id the parent's child would get.
        await client.start("child", {"mode": "wait"}, execution_id="p-x:kid")
        await client.start("parent", {"mode": "ok"}, execution_id="p-x")
        failed = await client.wait("p-x", timeout=20)
        assert failed["status"] == "failed"
        assert failed["steps"]["kid"]["error"]["code"] == "CHILD_ID_TAKEN"
        squatter = await client.get("p-x:kid")
        assert (squatter["status"], squatter["parent"]) == ("running", None)


SLOW_CHILD = """
orbit: 1
workflow: slow-child
version: 1.0.0
steps:
  - id: nap
    sleep: 3s
output: {slept: true}
"""

IMPATIENT = """
orbit: 1
workflow: impatient
version: 1.0.0
steps:
  - id: kid
    workflow: slow-child@1.0.0
    timeout: 2s          # the child needs 3 s: the first attempt times out
    retry: {max_attempts: 2, initial_interval: 100ms}
output: ${ steps.kid.output }
"""


async def test_a_retried_child_step_waits_for_the_same_child(orbit_env: OrbitEnv) -> None:
    async with running_stack(orbit_env.settings) as stack:
        client = stack.client
        await client.deploy(IMPATIENT, SLOW_CHILD)
        await client.start("impatient", None, execution_id="i-1")
        done = await client.wait("i-1", timeout=20)
        assert done["status"] == "completed"
        assert done["output"] == {"slept": True}
        assert done["steps"]["kid"]["attempt"] == 2
        child = await client.history("i-1:kid")
        assert [e["type"] for e in child].count("WorkflowCreated") == 1
        assert "ParentReattached" in [e["type"] for e in child]
