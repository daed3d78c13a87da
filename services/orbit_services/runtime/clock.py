"""The clocks of the services, in the unit the pure core takes ``now`` in (epoch ms).

Every time Orbit compares is Postgres's: a timer's due time (the decider computes
it), its firing (the timer service takes what is due), a task's last heartbeat (the
dispatcher records it) and the decider's look at it. So no process's own clock
matters: a timer replica 60 s ahead fired every timer 5 s early and started a storm
of refirings, and a worker 60 s behind failed every task it heartbeated. A service
reads Postgres's clock through :class:`PostgresClock`, which asks Postgres now and
then and counts the time between on the process's monotonic clock (never stepped,
and running at the same rate everywhere, whatever the wall clock says).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from orbit_sdk.clock import epoch_ms

log = logging.getLogger("orbit.clock")

RESYNC_SECONDS = 30.0
"""How often a :class:`PostgresClock` asks Postgres again: monotonic clocks drift
from it by parts per million, milliseconds an hour."""


def _monotonic_ms() -> float:
    return time.monotonic() * 1000


class PostgresClock:
    """Postgres's clock, read without asking it each time.

    Args:
        read: Postgres's ``clock_timestamp()`` in epoch ms (``EventStore.now_ms``).
    """

    def __init__(self, read: Callable[[], Awaitable[int]]) -> None:
        self._read = read
        self._base: float | None = None
        """Postgres's epoch ms at this process's monotonic 0, once synced."""

    @property
    def synced(self) -> bool:
        return self._base is not None

    async def sync(self) -> None:
        """Ask Postgres for its time; the answer is taken as of the request's midpoint.

        Raises:
            OrbitError: ``UNAVAILABLE`` when Postgres does not answer.
        """
        sent = _monotonic_ms()
        postgres = await self._read()
        received = _monotonic_ms()
        self._base = postgres - (sent + received) / 2

    def now(self) -> int:
        """Postgres's time now, epoch ms (this process's own before the first sync)."""
        if self._base is None:
            return epoch_ms()
        return int(self._base + _monotonic_ms())

    async def run(self, every: float = RESYNC_SECONDS) -> None:
        """Sync every ``every`` seconds until cancelled; a failed sync keeps the last."""
        while True:
            await asyncio.sleep(every)
            try:
                await self.sync()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning(
                    "reading Postgres's clock failed, the last reading is kept: %r",
                    error,
                    extra={"action": "clock.sync_failed"},
                )
