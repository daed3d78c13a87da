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

from orbit_model.broker_roles import Role
from orbit_sdk.amqp import Publisher, connect, open_channel
from orbit_sdk.logs import LogThrottle
from orbit_services.runtime.broker import declare_topology
from orbit_services.runtime.clock import PostgresClock
from orbit_services.runtime.host import Host
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
        self._host = Host(self.name)
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
        """Connect, listen for timers written, fire and expire; return once serving.

        Raises:
            OrbitError: ``UNAVAILABLE`` when Postgres or RabbitMQ cannot be
                reached (nothing is left open).
        """
        await self._host.start(self._start)

    async def _start(self, host: Host) -> None:
        settings = self.settings
        check_identity(settings, Role.TIMER)
        store = await host.acquire(
            "postgres",
            EventStore.connect(settings.database_url, min_size=1, max_size=2),
            lambda store: store.close,  # the LISTEN connection with it
        )
        await store.timers.listen(self._announced, on_back=self._nearer.set)
        connection = await host.acquire(
            "rabbitmq", connect(settings.amqp_url), lambda connection: connection.close
        )
        channel = await open_channel(connection)
        await declare_topology(channel, self.topology)
        publisher = Publisher(channel)
        self._liveness = Liveness(store, publisher, self.topology, settings.session_timeout_ms)
        # A timer is due by Postgres's clock, as its due time was computed (runtime.clock):
        # a replica whose own clock is ahead fires nothing early.
        clock = PostgresClock(store.now_ms)
        await clock.sync()
        host.run(self._run(store, publisher, clock), "timer.fire")
        host.run(self._liveness.run(), "timer.liveness")
        host.run(self._gauge(store, clock), "timer.gauges")
        host.run(clock.run(), "timer.clock")
        self._metrics.start()
        host.on_stop("metrics", self._metrics.stop)

    def _announced(self, due: int) -> None:
        """An append wrote a timer due at ``due``: wake up if it is nearer."""
        if self._next_due is None or due < self._next_due:
            self._nearer.set()

    async def _run(self, store: EventStore, publisher: Publisher, clock: PostgresClock) -> None:
        while True:
            # Cleared before looking, so a notification that comes while we look is kept.
            self._nearer.clear()
            try:
                while fired := await fire_due(store, publisher, self.topology, clock.now()):
                    self.fired += fired
                self._next_due = await store.timers.next_due()
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
                wait = min(wait, self._next_due - clock.now())
            # asyncio.timeout, not wait_for: on Python 3.11 a stop() that cancels
            # this as the wait times out was swallowed by wait_for, and the stop
            # then waited for ever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(wait, 1) / 1000):
                    await self._nearer.wait()

    async def _gauge(self, store: EventStore, clock: PostgresClock) -> None:
        gauges = Gauges(store)
        while True:
            try:
                await gauges.refresh(clock.now())
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
        """Stop serving metrics, firing and expiring; close the connections."""
        await self._host.stop()
