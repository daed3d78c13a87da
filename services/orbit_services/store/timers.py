"""The ``timers`` table: due timers taken to fire, the next due time, and LISTEN.

The decider keeps ``timers`` equal to what each execution waits on, in the
same statement as the events that set them, and the statement NOTIFYs the
nearest due time it wrote (channel :data:`~.sql.TIMERS_CHANNEL`). Firing
deletes the due rows under ``FOR UPDATE SKIP LOCKED`` and publishes their
messages before the delete commits: several timer replicas never fire a row
twice, and a publish that fails rolls the delete back.

The LISTEN connection is the store's only connection outside its pool (a
LISTEN is session state, which pooled connections never keep). When it drops
it is opened again, with backoff, and the listener is told it is back: a
notification may have been missed meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence

import asyncpg

from orbit_services.store import sql
from orbit_services.store.pool import Database, translated
from orbit_services.store.rows import DueTimer

log = logging.getLogger("orbit.timer")

Publish = Callable[[Sequence[DueTimer]], Awaitable[None]]

LISTENER_NAME = "orbit-timers"
"""How the LISTEN connection shows in ``pg_stat_activity`` (its ``application_name``)."""
_CLOSE_SECONDS = 5.0
"""How long closing the LISTEN connection may take before it is closed hard."""


class TimerStore:
    """Due timers (``EventStore.timers``) and the notifications of nearer ones."""

    def __init__(self, database: Database, url: str) -> None:
        self._db = database
        self._url = url
        self._listener: _Listener | None = None

    async def fire_due(self, now: int, limit: int, publish: Publish) -> list[DueTimer]:
        """Take the timers due at ``now`` (up to ``limit``), have ``publish`` send their
        firings, and delete them only if it did; the timers fired.

        Raises:
            Exception: Whatever ``publish`` raised (nothing was deleted then).
        """
        async with self._db.transaction() as transaction:
            rows = await transaction.fetch(sql.TAKE_DUE_TIMERS, now=now, limit=limit)
            due = [DueTimer(row["execution_id"], row["key"], int(row["due_at"])) for row in rows]
            if due:
                await publish(due)
        return due

    async def next_due(self) -> int | None:
        """When the next timer is due (epoch ms), or None without timers."""
        value = await self._db.fetchval(sql.NEXT_TIMER_DUE)
        return None if value is None else int(value)

    async def of(self, execution_id: str) -> dict[str, int]:
        """The timers the table holds for an execution, by key (for an execution whose
        state cannot be read: those to clear as it ends)."""
        rows = await self._db.fetch(sql.TIMERS_OF, execution_id=execution_id)
        return {row["key"]: int(row["due_at"]) for row in rows}

    async def listen(self, on_due: Callable[[int], None], on_back: Callable[[], None]) -> None:
        """Call ``on_due(due_at)`` for every nearest due time an append announces, and
        ``on_back()`` whenever a lost LISTEN connection is open again.

        Raises:
            OrbitError: ``UNAVAILABLE`` if the first connection cannot be opened.
        """
        listener = _Listener(self._url, on_due, on_back)
        await listener.open()
        self._listener = listener

    async def stop_listening(self) -> None:
        """Close the LISTEN connection (hard, if Postgres does not answer in 5 s)."""
        if self._listener is not None:
            await self._listener.close()
            self._listener = None


class _Listener:
    """One LISTEN connection, opened again when it drops."""

    def __init__(
        self, url: str, on_due: Callable[[int], None], on_back: Callable[[], None]
    ) -> None:
        self._url = url
        self._on_due = on_due
        self._on_back = on_back
        self._connection: asyncpg.Connection | None = None
        self._reopening: asyncio.Task[None] | None = None
        self._closing = False

    async def open(self) -> None:
        with translated():
            connection = await asyncpg.connect(
                self._url, server_settings={"application_name": LISTENER_NAME}
            )
        try:
            with translated():
                await connection.add_listener(sql.TIMERS_CHANNEL, self._notified)
        except BaseException:
            await connection.close()
            raise
        # A drop in the instant before this is left to the service's safety poll.
        connection.add_termination_listener(self._lost)
        self._connection = connection

    def _notified(self, _connection: object, _pid: int, _channel: str, payload: object) -> None:
        with contextlib.suppress(TypeError, ValueError):
            self._on_due(int(str(payload)))

    def _lost(self, _connection: object) -> None:
        if self._closing or self._reopening is not None:
            return
        log.warning(
            "the LISTEN connection to Postgres was lost; opening it again",
            extra={"action": "timers.listen_lost"},
        )
        self._reopening = asyncio.get_running_loop().create_task(
            self._reopen(), name="timer.listen"
        )

    async def _reopen(self) -> None:
        delay = 0.1
        try:
            while not self._closing:
                try:
                    await self.open()
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
                    self._on_back()  # a notification may have been missed meanwhile
                    return
        finally:
            self._reopening = None

    async def close(self) -> None:
        self._closing = True
        if self._reopening is not None:
            self._reopening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reopening
        connection = self._connection
        if connection is not None and not connection.is_closed():
            try:
                async with asyncio.timeout(_CLOSE_SECONDS):
                    await connection.close()
            except (TimeoutError, OSError, asyncpg.PostgresError):
                connection.terminate()
