"""A worker for the clock fault test, run as a process of its own (its clock skewed).

``pulse@1`` heartbeats once a second for ``input.seconds`` seconds, then answers
``{"pulses": N}``; each run is counted in the sink named by ``ORBIT_TEST_SINK``.
"""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path
from typing import Any

from orbit_sdk import TaskContext, task

from .sink import Sink

WHO = f"{socket.gethostname()}-{os.getpid()}"


@task("pulse", version="1")
async def pulse(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    Sink(Path(os.environ["ORBIT_TEST_SINK"])).record(ctx.idempotency_key, ctx.token, WHO)
    pulses = 0
    for _ in range(int(inp["seconds"])):
        await asyncio.sleep(1)
        await ctx.heartbeat()
        pulses += 1
    return {"pulses": pulses}


worker = [pulse]
