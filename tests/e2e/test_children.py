"""Child workflows end to end: one that succeeds, one that fails, one cancelled with its parent."""

from __future__ import annotations

from typing import Any

from orbit_model.views import view_json
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

        ok = view_json(await client.wait("p-ok", timeout=20))
        assert ok["status"] == "completed"
        assert ok["output"] == {"done": {"by": "p-ok:kid"}}
        child = view_json(await client.get("p-ok:kid"))
        assert (child["status"], child["parent"]) == ("completed", "p-ok:kid")

        failed = view_json(await client.wait("p-fail", timeout=20))
        assert failed["status"] == "failed"
        error = failed["steps"]["kid"]["error"]
        assert error["code"] == "CHILD_FAILED"
        assert (error["details"]["child_execution_id"], error["details"]["status"]) == (
            "p-fail:kid",
            "failed",
        )
        assert error["details"]["error"]["code"] == "BROKEN"
        # The child's error is the cause, and the task's own below it, with the step.
        assert error["cause"]["execution_id"] == "p-fail:kid"
        assert (error["cause"]["cause"]["code"], error["cause"]["cause"]["step"]) == (
            "BROKEN",
            "work",
        )
        assert failed["error"]["cause"]["cause"]["cause"]["message"] == "the child broke"
        assert failed["steps"]["kid"]["children"] == ["p-fail:kid"]
        assert (await client.get("p-fail:kid")).status == "failed"

        async def child_status() -> str:
            try:
                return str((await client.get("p-wait:kid")).status)
            except Exception:
                return "missing"

        await eventually(child_status, lambda s: s == "running", what="the waiting child")
        await client.cancel("p-wait", "no longer needed")
        cancelled = view_json(await client.wait("p-wait", timeout=20))
        assert cancelled["status"] == "cancelled"
        assert cancelled["steps"]["kid"]["status"] == "cancelled"
        child = view_json(await client.wait("p-wait:kid", timeout=20))
        assert child["status"] == "cancelled"


async def test_an_execution_that_took_the_child_id_is_left_alone(orbit_env: OrbitEnv) -> None:
    async with running_stack(orbit_env.settings, [work, undo]) as stack:
        client = stack.client
        await client.deploy(PARENT, CHILD)
        # Someone started an execution under the id the parent's child would get.
        await client.start("child", {"mode": "wait"}, execution_id="p-x:kid")
        await client.start("parent", {"mode": "ok"}, execution_id="p-x")
        failed = view_json(await client.wait("p-x", timeout=20))
        assert failed["status"] == "failed"
        assert failed["steps"]["kid"]["error"]["code"] == "CHILD_ID_TAKEN"
        squatter = view_json(await client.get("p-x:kid"))
        assert (squatter["status"], squatter["parent"]) == ("running", None)


SLOW_CHILD = """
orbit: 1
workflow: slow-child
version: 1.0.0
steps:
  - id: nap
    sleep: 20s
output: {slept: true}
"""

IMPATIENT = """
orbit: 1
workflow: impatient
version: 1.0.0
steps:
  - id: kid
    workflow: slow-child@1.0.0
    timeout: 2s          # the child needs 20 s: each attempt times out, however slow the machine
    retry: {max_attempts: 2, initial_interval: 100ms}
output: ${ steps.kid.output }
"""


async def test_a_timed_out_attempt_cancels_its_child_and_the_retry_starts_another(
    orbit_env: OrbitEnv,
) -> None:
    async with running_stack(orbit_env.settings) as stack:
        client = stack.client
        await client.deploy(IMPATIENT, SLOW_CHILD)
        await client.start("impatient", None, execution_id="i-1")
        done = view_json(await client.wait("i-1", timeout=60))
        # Each attempt's child needs 20 s and gets 2: both are given up on.
        assert done["status"] == "failed"
        assert done["error"]["code"] == "TIMEOUT"
        assert done["steps"]["kid"]["attempt"] == 2
        assert done["steps"]["kid"]["children"] == ["i-1:kid", "i-1:kid:attempt-2"]
        for child_id in done["steps"]["kid"]["children"]:
            child = view_json(await client.wait(child_id, timeout=30))
            assert child["status"] == "cancelled"
            assert child["parent"] == "i-1:kid"


FLAKY_PARENT = """
orbit: 1
workflow: flaky-parent
version: 1.0.0
tasks:
  undo: {version: "1"}
steps:
  - id: kid
    workflow: child@1.0.0
    input: {mode: "fail-first"}
    retry: {max_attempts: 2, initial_interval: 100ms}
output: ${ steps.kid.output }
"""


@task("work", version="1")
async def fails_in_the_first_child(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    if not ctx.execution_id.endswith(":attempt-2"):
        raise TaskError("BROKEN", "the first child broke")  # retryable: try another child
    return {"by": ctx.execution_id}


async def test_a_failed_child_is_retried_as_a_new_child(orbit_env: OrbitEnv) -> None:
    async with running_stack(orbit_env.settings, [fails_in_the_first_child, undo]) as stack:
        client = stack.client
        await client.deploy(FLAKY_PARENT, CHILD)
        await client.start("flaky-parent", None, execution_id="f-1")
        done = view_json(await client.wait("f-1", timeout=30))
        assert done["status"] == "completed", done
        assert done["output"] == {"done": {"by": "f-1:kid:attempt-2"}}
        assert done["steps"]["kid"]["children"] == ["f-1:kid", "f-1:kid:attempt-2"]
        assert (await client.get("f-1:kid")).status == "failed"
