"""The timer and liveness service: fires due timers, and expires silent worker sessions.

It sleeps until the next timer is due. Appends that write a timer send a
NOTIFY with its due time at commit; the service LISTENs, so a nearer timer
written meanwhile wakes it at once instead of a fast poll. A slow poll
(``SAFETY_POLL_MS``) remains, in case a notification is lost with a
dropped connection; a LISTEN connection that drops is opened again (with
backoff), and the service looks at the timers at once when it is back.

Liveness: a worker session not heard from within ``ORBIT_SESSION_TIMEOUT_MS``
is closed, and each task it held at its last heartbeat is reported to the
decider as a ``DeliveryLost``: the attempt becomes uncertain and is
redelivered with the same idempotency key and ``redelivery: true``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import asyncpg
from aio_pika.abc import AbstractRobustConnection

from orbit_model.messages import DeliveryLost, InflightTask, encode
from orbit_model.topology import Topology
from orbit_sdk.amqp import Publisher, connect, open_channel
from orbit_services.runtime.broker import declare_topology
from orbit_services.runtime.clock import epoch_ms
from orbit_services.runtime.metrics import MetricsEndpoint
from orbit_services.runtime.settings import Settings
from orbit_services.runtime.store import EventStore, OutboxMessage, sql
from orbit_services.runtime.store.sessions import SessionRegistry
from orbit_services.timer.firing import fire_due, next_due
from orbit_services.timer.gauges import Gauges

log = logging.getLogger("orbit.timer")

SAFETY_POLL_MS = 1_000


class TimerService:
    name = "timer"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topology = Topology(settings.namespace, settings.decider_partitions)
        self._store: EventStore | None = None
        self._connection: AbstractRobustConnection | None = None
        self._listener: asyncpg.Connection | None = None
        self._relisten: asyncio.Task[None] | None = None
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._liveness: asyncio.Task[None] | None = None
        self._gauging: asyncio.Task[None] | None = None
        self._nearer = asyncio.Event()
        self._next_due: int | None = None
        self.fired = 0
        self.expired = 0
        """Worker sessions expired so far."""
        self._metrics = MetricsEndpoint(settings.metrics_port, settings.http_host)

    async def start(self) -> None:
        self._store = await EventStore.connect(self.settings.database_url, min_size=1, max_size=2)
        await self._listen()
        self._connection = await connect(self.settings.amqp_url)
        channel = await open_channel(self._connection)
        await declare_topology(channel, self.topology)
        publisher = Publisher(channel)
        self._task = asyncio.create_task(self._run(publisher), name="timer.fire")
        self._liveness = asyncio.create_task(self._watch(publisher), name="timer.liveness")
        self._gauging = asyncio.create_task(self._gauge(), name="timer.gauges")
        self._metrics.start()

    async def _listen(self) -> None:
        """Open the LISTEN connection; when it drops, open it again."""
        listener = await asyncpg.connect(self.settings.database_url)
        try:
            await listener.add_listener(sql.TIMERS_CHANNEL, self._on_notify)
        except BaseException:
            await listener.close()
            raise
        # A drop in the instant before this is left to the safety poll.
        listener.add_termination_listener(self._on_listener_lost)
        self._listener = listener

    def _on_listener_lost(self, _connection: object) -> None:
        if self._stopping or self._relisten is not None:
            return
        log.warning(
            "the LISTEN connection to Postgres was lost; opening it again",
            extra={"action": "timers.listen_lost"},
        )
        self._relisten = asyncio.get_running_loop().create_task(
            self._listen_again(), name="timer.listen"
        )

    async def _listen_again(self) -> None:
        delay = 0.1
        try:
            while not self._stopping:
                try:
                    await self._listen()
                except Exception as error:
                    log.warning(
                        "listening again failed, retrying in %.1f s: %r",
                        delay,
                        error,
                        extra={"action": "timers.listen_failed"},
                    )
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
                else:
                    self._nearer.set()  # a notification may have been missed meanwhile
                    return
        finally:
            self._relisten = None

    def _on_notify(self, _connection: object, _pid: int, _channel: str, payload: object) -> None:
        with contextlib.suppress(TypeError, ValueError):
            due = int(str(payload))
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
                self._next_due = await next_due(self._store)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("firing timers failed: %r", error, extra={"action": "timers.failed"})
                self._next_due = None
            wait = SAFETY_POLL_MS
            if self._next_due is not None:
                wait = min(wait, self._next_due - epoch_ms())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._nearer.wait(), max(wait, 1) / 1000)

    async def _watch(self, publisher: Publisher) -> None:
        assert self._store is not None
        registry = SessionRegistry(self._store.pool)
        timeout = self.settings.session_timeout_ms

        async def report(lost: list[tuple[str, InflightTask]]) -> None:
            messages = []
            for worker_id, task in lost:
                notice = DeliveryLost(
                    execution_id=task.execution_id,
                    token=task.token,
                    reason=f"worker {worker_id} was not heard from for {timeout} ms",
                )
                route = self.topology.decider_route(task.execution_id)
                messages.append(OutboxMessage(route.exchange, route.routing_key, encode(notice)))
            await publisher.publish_many(messages)

        while True:
            try:
                expired = await registry.expire(timeout, report)
                if expired:
                    self.expired += expired
                    log.warning(
                        "%d worker sessions expired", expired, extra={"action": "sessions.expired"}
                    )
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning(
                    "expiring sessions failed: %r", error, extra={"action": "sessions.failed"}
                )
            # A quarter of the timeout: a lost worker is noticed within 1.25 timeouts.
            await asyncio.sleep(max(timeout / 4, 50) / 1000)

    async def _gauge(self) -> None:
        assert self._store is not None
        gauges = Gauges(self._store)
        while True:
            try:
                await gauges.refresh(epoch_ms())
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning(
                    "refreshing gauges failed: %r", error, extra={"action": "gauges.failed"}
                )
            await asyncio.sleep(self.settings.gauge_interval_ms / 1000)

    async def stop(self) -> None:
        self._stopping = True
        await self._metrics.stop()
        for task in (self._task, self._liveness, self._gauging, self._relisten):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._listener is not None and not self._listener.is_closed():
            try:
                await asyncio.wait_for(self._listener.close(), 5)
            except (TimeoutError, OSError, asyncpg.PostgresError):
                self._listener.terminate()
        if self._connection is not None:
            await self._connection.close()
        if self._store is not None:
            await self._store.close()
