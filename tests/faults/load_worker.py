"""The worker of the replica-kill test, run as processes of their own.

``orbit worker tests.faults.load_worker:worker`` serves ``hop@1``: it records
each run in the sink named by ``ORBIT_TEST_SINK`` (:mod:`tests.faults.sink`)
and answers its input's ``n`` plus one.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from orbit_sdk import TaskContext, task

from .sink import Sink

WHO = f"{socket.gethostname()}-{os.getpid()}"


@task("hop", version="1")
async def hop(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    Sink(Path(os.environ["ORBIT_TEST_SINK"])).record(ctx.idempotency_key, ctx.token, WHO)
    return {"n": int(inp["n"]) + 1}


worker = [hop]
