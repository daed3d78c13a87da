"""Workers for the run-count fault tests, run as processes of their own.

``orbit worker tests.faults.sink_worker:worker`` records each run in the sink
named by ``ORBIT_TEST_SINK`` (:mod:`tests.faults.sink`):

- ``slow@1`` writes the file ``ORBIT_TEST_MARKER`` once it runs (so the test
  knows when to kill or freeze it), then holds the task for
  ``ORBIT_TEST_HOLD_SECONDS`` and succeeds;
- ``poison@1`` crashes its process on every delivery, right after a heartbeat
  that tells the engine this worker holds it.
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
"""This process's worker id (the SDK's default)."""


def _sink() -> Sink:
    return Sink(Path(os.environ["ORBIT_TEST_SINK"]))


@task("slow", version="1")
async def slow(inp: Any, ctx: TaskContext) -> dict[str, Any]:
    _sink().record(ctx.idempotency_key, ctx.token, WHO)
    Path(os.environ["ORBIT_TEST_MARKER"]).write_text(ctx.token)
    await asyncio.sleep(float(os.environ.get("ORBIT_TEST_HOLD_SECONDS", "600")))
    Path(os.environ["ORBIT_TEST_MARKER"] + ".done").write_text(ctx.token)
    return {"worker": WHO}


@task("poison", version="1")
async def poison(inp: Any, ctx: TaskContext) -> dict[str, Any]:
    _sink().record(ctx.idempotency_key, ctx.token, WHO)
    await ctx.heartbeat()
    os._exit(1)  # a crash: no ack, no result, no goodbye


worker = [slow, poison]
