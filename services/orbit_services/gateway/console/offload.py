"""The console's CPU work (its drawings, its big pages) on worker threads, off the event loop.

In ``orbit dev`` every service shares the gateway's loop, so a page drawn on it would
hold up every other request meanwhile. The work is bounded anyway (:mod:`.graph_layout`,
:mod:`.timeline`); here at most :data:`WORKERS` pages are drawn at once, whatever the
number of open tabs, and the rest wait their turn without holding the loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

WORKERS = 2

_POOL = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="orbit-console")


async def off_loop(work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``work(*args, **kwargs)`` on the console's threads, in the caller's context."""
    call = functools.partial(contextvars.copy_context().run, work, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_POOL, call)
