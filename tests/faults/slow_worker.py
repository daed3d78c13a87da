"""A worker for the fault tests, run as its own process: it takes a task and holds it.

``orbit worker tests.faults.slow_worker:worker`` with ``ORBIT_TEST_MARKER``
naming a file it writes when the task starts, so the test knows when to
kill or freeze it.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from orbit_sdk import TaskContext, task


@task("slow", version="1")
async def slow(inp: Any, ctx: TaskContext) -> dict[str, Any]:
    Path(os.environ["ORBIT_TEST_MARKER"]).write_text(ctx.token)
    await asyncio.sleep(600)
    return {"worker": "slow"}


worker = [slow]
