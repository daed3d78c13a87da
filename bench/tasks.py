"""The no-op workers: ``orbit worker bench.tasks:worker`` (run by the bench as its own process)."""

from __future__ import annotations

import os
from typing import Any

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
