"""The order-fulfilment example end to end: deploy, a worker, 100 executions with signals.

Everything runs for real: the gateway over HTTP, the decider, dispatcher and
timer services over RabbitMQ and Postgres, the example worker through the
SDK, and the child workflow send-invoice. Approved orders charge, ship and
invoice; the others are refused and ship nothing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from examples.workers import TASKS
from orbit_model.views import view_json
from tests.integration.conftest import OrbitEnv
from tests.views import as_sent

from .stack import running_stack

EXAMPLES = Path(__file__).parents[2] / "examples"
COUNT = 100


def _order(n: int) -> dict[str, object]:
    items = [{"sku": f"sku-{n}-{i}"} for i in range(1 + n % 3)]
    return {"order_id": f"o-{n}", "items": items, "callback_url": "https://shop.test/hook"}


async def test_one_hundred_orders_complete_with_the_right_outputs(orbit_env: OrbitEnv) -> None:
    async with running_stack(orbit_env.settings, TASKS) as stack:
        client = stack.client
        deployed = await client.deploy(EXAMPLES)
        names = [d["name"] for d in deployed]
        assert names.index("send-invoice") < names.index("order-fulfilment")

        ids = [f"order-{n}" for n in range(COUNT)]
        started = await asyncio.gather(
            *(
                client.start("order-fulfilment", _order(n), execution_id=ids[n])
                for n in range(COUNT)
            )
        )
        assert all(s["created"] for s in started)
        # A query answers while the executions run: nothing is charged before approval.
        assert await client.query(ids[0], "charged") is False
        await asyncio.gather(
            *(client.signal(ids[n], "approval", {"approved": n % 4 != 0}) for n in range(COUNT))
        )
        finished = await asyncio.gather(*(as_sent(client.wait(i, timeout=60)) for i in ids))
        child = view_json(await client.get(f"{ids[1]}:invoice"))
        assert (child["workflow"], child["status"]) == ("send-invoice", "completed")
        assert child["parent"] == f"{ids[1]}:invoice"

    for n, execution in enumerate(finished):
        assert execution["status"] == "completed", execution
        approved = n % 4 != 0
        output = execution["output"]
        assert output["approved"] is approved
        if approved:
            assert output["shipped"] == 1 + n % 3
            assert output["invoice"] == {"invoice_id": f"inv-o-{n}"}
            steps = execution["steps"]
            assert steps["charge"]["status"] == "succeeded"
            # The adapter is off: the webhook fails at once, and continue_on_error goes on.
            assert steps["webhook"]["error"]["code"] == "ADAPTER_DISABLED"
        else:
            assert output["shipped"] == 0
            assert execution["steps"]["charge"]["status"] == "skipped"
        assert execution["steps"]["unlock"]["status"] == "succeeded"
