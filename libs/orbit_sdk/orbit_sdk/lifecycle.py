"""How a service starts, runs and stops.

A service is an object with ``start()`` (connect, declare, begin consuming;
return once it serves) and ``stop()`` (stop taking new work, finish or give
back what it holds, close connections). :func:`run_until_stopped` runs one
or more of them until SIGTERM or SIGINT, then stops them in reverse order,
so a SIGTERM loses nothing.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

log = logging.getLogger("orbit.lifecycle")


class Service(Protocol):
    name: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on uvloop where it is installed (not on Windows), else asyncio's loop.

    uvloop's transports and callbacks are C: every service spends much of its
    time writing small AMQP frames and Postgres messages, and pays less there.
    """
    try:
        import uvloop  # noqa: PLC0415  (optional: no wheel for Windows)
    except ImportError:
        return asyncio.run(coroutine)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coroutine)


async def run_until_stopped(
    services: Sequence[Service],
    stop: asyncio.Event | None = None,
    when_started: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Start ``services`` in order, wait for a signal (or ``stop``), stop them in reverse.

    ``when_started`` runs once every service serves (the demo uses it); if it
    fails, everything stops.
    """
    stopping = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stopping.set)
    started: list[Service] = []
    try:
        for service in services:
            await service.start()
            started.append(service)
            log.info("%s started", service.name, extra={"action": "service.started"})
        if when_started is not None:
            await when_started()
        await stopping.wait()
    finally:
        for number in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(number)
        for service in reversed(started):
            try:
                await service.stop()
            except Exception:
                log.exception("%s did not stop cleanly", service.name)
            log.info("%s stopped", service.name, extra={"action": "service.stopped"})
