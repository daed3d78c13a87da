"""Waiting in tests: poll a condition until it holds, never a bare sleep.

The default bound is generous: what takes milliseconds on an idle machine may take
seconds on one busy with other work, and only a condition that never holds waits
the whole bound.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T]],
    until: Callable[[T], bool] = bool,
    timeout: float = 30.0,
    interval: float = 0.02,
    what: str = "the condition",
) -> T:
    """Call ``probe`` until ``until(result)`` holds; its result, or AssertionError at timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if until(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not hold within {timeout} s; last value: {value!r}")
        await asyncio.sleep(interval)
