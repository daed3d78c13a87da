"""How every service starts and stops: resources acquired in steps, released in reverse.

A service's start is a sequence of steps (open the Postgres pool, connect to
RabbitMQ, start a background task, serve a port), each of which registers with
the service's :class:`Host` how to release what it acquired. If a step fails,
what the steps before it acquired is released, newest first, and the step's
error is raised: a start that fails halfway leaves nothing open, and a process
that retries its start does not pile up pools. ``stop()`` releases everything
the same way, once however often it is called. A release that fails is logged
and the others still run: one broken connection must not keep a pool open.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

log = logging.getLogger("orbit.host")

Release = Callable[[], Awaitable[object] | None]
"""Gives back one resource; a plain function or a coroutine function."""


class Host:
    """One service's resources, in the order they were acquired.

    Args:
        service: The service's name, for the logs.
    """

    def __init__(self, service: str) -> None:
        self.service = service
        self._releases: list[tuple[str, Release]] = []
        self._releasing = asyncio.Lock()
        self.stopping = False
        """Whether :meth:`stop` has begun: work that waits to be retried gives up."""

    async def start(self, steps: Callable[[Host], Awaitable[None]]) -> None:
        """Run ``steps`` (the service's start, acquiring through this host); if they fail,
        release what they acquired, in reverse, then raise their error."""
        self.stopping = False
        try:
            await steps(self)
        except BaseException:
            await self.stop()
            raise

    def on_stop(self, what: str, release: Release) -> None:
        """Call ``release`` when the service stops (before what was registered earlier)."""
        self._releases.append((what, release))

    async def acquire(self, what: str, opening: Awaitable[T], close: Callable[[T], Release]) -> T:
        """Await ``opening`` and register closing what it gave: ``close(it)`` is the release.

        If ``opening`` fails, nothing was acquired and nothing is registered.
        """
        resource = await opening
        self.on_stop(what, close(resource))
        return resource

    def run(self, coroutine: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Run ``coroutine`` in the background until the service stops (then it is
        cancelled, and awaited)."""
        task = asyncio.create_task(coroutine, name=name)
        self.on_stop(name, lambda: cancel(task))
        return task

    async def stop(self) -> None:
        """Release everything acquired, newest first; a second call finds nothing left.

        Never raises for a failed release: it is logged, and the next one runs.
        """
        self.stopping = True
        async with self._releasing:
            while self._releases:
                what, release = self._releases.pop()
                try:
                    outcome = release()
                    if inspect.isawaitable(outcome):
                        await outcome
                except Exception:
                    log.exception(
                        "%s: releasing %s failed",
                        self.service,
                        what,
                        extra={"action": "service.release_failed"},
                    )


async def cancel(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait for it to end.

    Raises:
        Exception: What ``task`` failed with, if it failed rather than being cancelled.
    """
    task.cancel()
    # wait(), not ``await task``: a cancellation of the caller is not taken for the task's.
    await asyncio.wait([task])
    if not task.cancelled() and (error := task.exception()) is not None:
        raise error


__all__ = ["Host", "Release", "cancel"]
