"""Workers and clients written to the previous protocol version keep working.

docs/protocol.md ("Versions") promises that Orbit reads version 1 of what
workers and clients send for a window after version 2. These tests run the
recorded version-1 worker and client (:mod:`tests.compat.v1_worker`: raw
aio-pika, nothing of Orbit's) against the whole engine, as a user per role
and with one user for all, and check what a version it does not read gets.
"""

from __future__ import annotations

from typing import Any

import pytest

from orbit_model.views import view_json
from tests.e2e.stack import Stack, running_stack
from tests.integration.conftest import OrbitEnv

from .v1_worker import ControlFailure, V1Worker, v1_command

DOUBLING = """
orbit: 1
workflow: v1-doubling
version: 1.0.0
tasks:
  v1.double: {version: "1"}
steps:
  - id: twice
    task: v1.double
    input: ${ input }
output: ${ steps.twice.output }
"""


async def double(value: Any) -> dict[str, Any]:
    return {"n": value["n"] * 2}


async def _run_one(stack: Stack, worker_url: str, client_url: str, *, user_id: bool) -> None:
    """Serve with the v1 worker, start with the v1 client, and see the execution complete."""
    namespace = stack.settings.namespace
    await stack.client.deploy(DOUBLING)
    worker = V1Worker(worker_url, namespace, {"v1.double@1": double}, user_id=user_id)
    registration = await worker.start()
    try:
        assert registration["type"] == "Registration"
        start = {
            "v": 1,
            "type": "StartExecution",
            "workflow": "v1-doubling",
            "input": {"n": 21},
            "execution_id": "v1-a",
        }
        reply = await v1_command(client_url, namespace, start, user_id=user_id)
        assert reply == {
            "v": 1,
            "type": "CommandReply",
            "ok": True,
            "result": {"execution_id": "v1-a", "created": True},
            "error": None,
        }
        done = view_json(await stack.client.wait("v1-a", timeout=30))
        assert (done["status"], done["output"]) == ("completed", {"n": 42})
    finally:
        await worker.stop()
    # Every answer it got is one it reads: version 1.
    assert {answer["v"] for answer in worker.replies} == {1}
    assert [answer["type"] for answer in worker.replies][-1] == "Unregistered"


async def test_a_version_1_worker_and_client_with_user_id_run_as_users_per_role(
    roles_env: OrbitEnv,
) -> None:
    async with running_stack(roles_env.settings) as stack:
        assert stack.roles is not None
        await _run_one(stack, stack.roles.worker, stack.roles.client, user_id=True)


async def test_the_first_edition_of_version_1_runs_with_one_user_for_all(
    shared_env: OrbitEnv,
) -> None:
    async with running_stack(shared_env.settings) as stack:
        url = stack.settings.amqp_url
        await _run_one(stack, url, url, user_id=False)


async def test_the_first_edition_of_version_1_is_told_why_it_is_refused_as_users_per_role(
    roles_env: OrbitEnv,
) -> None:
    async with running_stack(roles_env.settings) as stack:
        assert stack.roles is not None
        namespace = stack.settings.namespace
        worker = V1Worker(stack.roles.worker, namespace, {"v1.double@1": double}, user_id=False)
        with pytest.raises(ControlFailure) as refused:
            await worker.start()
        await worker.stop()
        assert refused.value.code == "PERMISSION_DENIED"
        told = refused.value.message
        assert told.startswith("a message with no user_id may not send RegisterWorker")
        assert "This is a version 1 message" in told
        assert "None" not in told
        start = {"v": 1, "type": "StartExecution", "workflow": "v1-doubling"}
        reply = await v1_command(stack.roles.client, namespace, start, user_id=False)
        assert reply["error"]["code"] == "PERMISSION_DENIED"
        assert reply["error"]["message"].startswith(
            "a message with no user_id may not send StartExecution"
        )


async def test_a_version_orbit_does_not_read_is_refused_naming_those_it_does(
    roles_env: OrbitEnv,
) -> None:
    async with running_stack(roles_env.settings) as stack:
        assert stack.roles is not None
        namespace = stack.settings.namespace
        worker = V1Worker(stack.roles.worker, namespace, {"v1.double@1": double})
        await worker.start()
        try:
            with pytest.raises(ControlFailure) as refused:
                await worker.control({"v": 3, "type": "Heartbeat", "session_id": "s"})
        finally:
            await worker.stop()
        assert refused.value.code == "UNSUPPORTED_VERSION"
        assert refused.value.message.startswith(
            "Heartbeat version 3 is not supported: this Orbit reads version 1 or 2 of it"
        )
        start = {"v": 3, "type": "StartExecution", "workflow": "v1-doubling"}
        reply = await v1_command(stack.roles.client, namespace, start)
        assert (reply["ok"], reply["error"]["code"]) == (False, "UNSUPPORTED_VERSION")
