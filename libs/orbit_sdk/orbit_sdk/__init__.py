"""What Orbit's users import: the worker SDK, the HTTP and AMQP clients, the command line.

::

    from orbit_sdk import Worker, TaskContext, TaskError, task

    @task("charge-card", version="2")
    async def charge_card(inp: ChargeIn, ctx: TaskContext) -> ChargeOut: ...

    Worker([charge_card], worker_id="billing-1").run_forever()
"""

from orbit_sdk.amqp_client import AmqpClient, publish_cancel, publish_signal, publish_start
from orbit_sdk.client import OrbitClient, OrbitClientError
from orbit_sdk.tasks import TaskContext, TaskError, task
from orbit_sdk.worker import Worker

__all__ = [
    "AmqpClient",
    "OrbitClient",
    "OrbitClientError",
    "TaskContext",
    "TaskError",
    "Worker",
    "publish_cancel",
    "publish_signal",
    "publish_start",
    "task",
]
