"""The timer and liveness service: fires due timers, and expires silent worker sessions.

It sleeps until the next timer is due. Appends that write a timer send a
NOTIFY with its due time at commit; the service LISTENs (through the store),
so a nearer timer written meanwhile wakes it at once instead of a fast poll.
A slow poll (``SAFETY_POLL_MS``) remains, in case a notification is lost with
a dropped connection; the store opens a LISTEN connection that drops again,
and the service looks at the timers at once when it is back.

Liveness (:mod:`.liveness`): a worker session not heard from within
``ORBIT_SESSION_TIMEOUT_MS`` is closed, and each task it held is reported to
the decider as lost. The gauges (:mod:`.gauges`) are counted here too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aio_pika.abc import AbstractRobustConnection

from orbit_model.broker_roles import Role
from orbit_sdk.amqp import Publisher, connect, open_channel
from orbit_sdk.logs import LogThrottle
from orbit_services.runtime.broker import declare_topology
from orbit_services.runtime.clock import epoch_ms
from orbit_services.runtime.metrics import MetricsEndpoint
from orbit_services.runtime.senders import check_identity
from orbit_services.runtime.settings import Settings
from orbit_services.store import EventStore
from orbit_services.timer.firing import fire_due
from orbit_services.timer.gauges import Gauges
from orbit_services.timer.liveness import Liveness

log = logging.getLogger("orbit.timer")

SAFETY_POLL_MS = 1_000


class TimerService:
    name = "timer"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topology = settings.topology
        self._store: EventStore | None = None
        self._connection: AbstractRobustConnection | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._nearer = asyncio.Event()
        self._next_due: int | None = None
        self._liveness: Liveness | None = None
        self.fired = 0
        self._failures = LogThrottle(log)
        self._metrics = MetricsEndpoint(settings.metrics_port, settings.http_host)

    @property
    def expired(self) -> int:
        """Worker sessions expired so far."""
        return 0 if self._liveness is None else self._liveness.expired

    async def start(self) -> None:
        settings = self.settings
        check_identity(settings, Role.TIMER)
        self._store = store = await EventStore.connect(
            settings.database_url, min_size=1, max_size=2
        )
        await store.timers.listen(self._announced, on_back=self._nearer.set)
        self._connection = await connect(settings.amqp_url)
        channel = await open_channel(self._connection)
        await declare_topology(channel, self.topology)
        publisher = Publisher(channel)
        self._liveness = Liveness(store, publisher, self.topology, settings.session_timeout_ms)
        self._tasks = [
            asyncio.create_task(self._run(publisher), name="timer.fire"),
            asyncio.create_task(self._liveness.run(), name="timer.liveness"),
            asyncio.create_task(self._gauge(), name="timer.gauges"),
        ]
        self._metrics.start()

    def _announced(self, due: int) -> None:
        """An append wrote a timer due at ``due``: wake up if it is nearer."""
        if self._next_due is None or due < self._next_due:
            self._nearer.set()

    async def _run(self, publisher: Publisher) -> None:
        assert self._store is not None
        while True:
            # Cleared before looking, so a notification that comes while we look is kept.
            self._nearer.clear()
            try:
                while fired := await fire_due(self._store, publisher, self.topology, epoch_ms()):
                    self.fired += fired
                self._next_due = await self._store.timers.next_due()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self._failures.log(
                    logging.WARNING,
                    "fire",
                    "firing timers failed: %r",
                    error,
                    extra={"action": "timers.failed"},
                )
                self._next_due = None
            wait = SAFETY_POLL_MS
            if self._next_due is not None:
                wait = min(wait, self._next_due - epoch_ms())
            # asyncio.timeout, not wait_for: on Python 3.11 a stop() that cancels
            # this as the wait times out was swallowed by wait_for, and the stop
            # then waited for ever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(wait, 1) / 1000):
                    await self._nearer.wait()

    async def _gauge(self) -> None:
        assert self._store is not None
        gauges = Gauges(self._store)
        while True:
            try:
                await gauges.refresh(epoch_ms())
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self._failures.log(
                    logging.WARNING,
                    "gauges",
                    "refreshing gauges failed: %r",
                    error,
                    extra={"action": "gauges.failed"},
                )
            await asyncio.sleep(self.settings.gauge_interval_ms / 1000)

    async def stop(self) -> None:
        await self._metrics.stop()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if self._connection is not None:
            await self._connection.close()
        if self._store is not None:
            await self._store.close()  # the LISTEN connection with it
