"""What Orbit's users import: the worker SDK and the HTTP and AMQP clients.

::

    from orbit_sdk import Worker, TaskContext, TaskError, task

    @task("charge-card", version="2")
    async def charge_card(inp: ChargeIn, ctx: TaskContext) -> ChargeOut: ...

    Worker([charge_card], worker_id="billing-1").run_forever()

The names are loaded when first used, and each loads little: a module that
defines tasks and a worker loads neither aio-pika nor the HTTP client (the
worker's AMQP machinery, :mod:`orbit_sdk.serving`, is loaded when it starts),
and ``OrbitClient`` loads httpx when a client is made. ``tests/unit/
test_architecture.py`` holds each under 250 modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orbit_model.lazy import lazy_attributes

if TYPE_CHECKING:
    from orbit_sdk.amqp_client import AmqpClient, publish_cancel, publish_signal, publish_start
    from orbit_sdk.client import OrbitClient, OrbitClientError
    from orbit_sdk.tasks import TaskContext, TaskError, task
    from orbit_sdk.worker import Worker

_WHERE = {
    "AmqpClient": "amqp_client",
    "OrbitClient": "client",
    "OrbitClientError": "client",
    "TaskContext": "tasks",
    "TaskError": "tasks",
    "Worker": "worker",
    "publish_cancel": "amqp_client",
    "publish_signal": "amqp_client",
    "publish_start": "amqp_client",
    "task": "tasks",
}

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


__getattr__, __dir__ = lazy_attributes(__name__, _WHERE, globals())
