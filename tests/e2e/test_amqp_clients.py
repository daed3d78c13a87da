"""A client that speaks only AMQP: a start and a signal published to the commands exchange."""

from __future__ import annotations

from pathlib import Path

from examples.workers import TASKS
from orbit_model.views import view_json
from orbit_sdk import AmqpClient
from tests.integration.conftest import OrbitEnv
from tests.integration.eventually import eventually

from .stack import running_stack

EXAMPLES = Path(__file__).parents[2] / "examples"


async def test_an_order_started_and_approved_over_amqp_completes(orbit_env: OrbitEnv) -> None:
    async with running_stack(orbit_env.settings, TASKS) as stack:
        await stack.client.deploy(EXAMPLES)
        async with AmqpClient(stack.as_user("client")) as amqp:
            order = {"order_id": "o-1", "items": [{"sku": "a"}], "callback_url": "https://x.test"}
            reply = await amqp.publish_start(
                "order-fulfilment", order, execution_id="amqp-1", wait_reply=True
            )
            assert reply is not None
            assert (reply.ok, reply.result) == (True, {"execution_id": "amqp-1", "created": True})

            async def waiting() -> str:
                return (await stack.client.get("amqp-1")).steps["approval"].status

            await eventually(waiting, lambda s: s == "scheduled", what="the approval step")
            # Refused while the execution still runs (once approved, it may end first).
            refused = await amqp.publish_signal("amqp-1", "nope", {}, wait_reply=True)
            assert refused is not None
            assert refused.error is not None
            assert (refused.ok, refused.error.code) == (False, "UNKNOWN_SIGNAL")
            # Answered as over HTTP: its seq, and the step that takes it.
            taken = await amqp.publish_signal(
                "amqp-1", "approval", {"approved": False}, wait_reply=True
            )
            assert taken is not None
            assert taken.ok, taken
            assert taken.result is not None
            assert isinstance(taken.result["seq"], int)
            assert (taken.result["taken"], taken.result["steps"]) == ("now", ["approval"])
            # Fire and forget: no reply asked for.
            assert await amqp.publish_signal("amqp-1", "approval", {"approved": True}) is None
        finished = view_json(await stack.client.wait("amqp-1", timeout=30))
    assert finished["status"] == "completed"
    assert finished["output"]["approved"] is False
