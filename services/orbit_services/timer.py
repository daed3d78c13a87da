"""The timer service: fires due timers to the decider.

It sleeps until the next timer is due, but never longer than a short poll
interval, because timers written meanwhile by deciders may be nearer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aio_pika.abc import AbstractRobustConnection

from orbit_runtime.broker import Publisher, Topology, connect, declare_topology, open_channel
from orbit_runtime.deciding import epoch_ms
from orbit_runtime.settings import Settings
from orbit_runtime.store import EventStore
from orbit_runtime.timers import fire_due, next_due

log = logging.getLogger("orbit.timer")

POLL_INTERVAL_MS = 50


class TimerService:
    name = "timer"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topology = Topology(settings.namespace, settings.decider_partitions)
        self._store: EventStore | None = None
        self._connection: AbstractRobustConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self.fired = 0

    async def start(self) -> None:
        self._store = await EventStore.connect(self.settings.database_url, min_size=1, max_size=2)
        self._connection = await connect(self.settings.amqp_url)
        channel = await open_channel(self._connection)
        await declare_topology(channel, self.topology)
        self._task = asyncio.create_task(self._run(Publisher(channel)), name="timer.fire")

    async def _run(self, publisher: Publisher) -> None:
        assert self._store is not None
        while True:
            try:
                while fired := await fire_due(self._store, publisher, self.topology, epoch_ms()):
                    self.fired += fired
                due = await next_due(self._store)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("firing timers failed: %r", error, extra={"action": "timers.failed"})
                due = None
            wait = POLL_INTERVAL_MS if due is None else min(POLL_INTERVAL_MS, due - epoch_ms())
            await asyncio.sleep(max(wait, 1) / 1000)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._connection is not None:
            await self._connection.close()
        if self._store is not None:
            await self._store.close()
