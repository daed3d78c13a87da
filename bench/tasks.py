"""The no-op workers: ``orbit worker bench.tasks:worker`` (run by the bench as its own process)."""

from __future__ import annotations

import os
from typing import Any

from prometheus_client import start_http_server

# The server's metrics count every AMQP publish of the process they are imported
# into (an SDK worker counts nothing by itself): the bench counts the worker's too.
import orbit_services.runtime.metrics  # noqa: F401
from orbit_sdk import TaskContext, Worker, task


@task("inc", version="1")
async def inc(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    return {"value": inp["value"] + 1}


@task("sum", version="1")
async def add_up(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    return {"total": sum(inp["values"])}


worker = Worker(
    [inc, add_up],
    worker_id=f"bench-{os.getpid()}",
    concurrency=int(os.environ.get("BENCH_WORKER_CONCURRENCY", "64")),
)

# The bench counts the messages the worker publishes from its /metrics.
if os.environ.get("BENCH_WORKER_METRICS_PORT"):
    start_http_server(int(os.environ["BENCH_WORKER_METRICS_PORT"]), addr="127.0.0.1")
