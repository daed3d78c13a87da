"""The ``timers`` table: due timers taken to fire, the next due time, and LISTEN.

The decider keeps ``timers`` equal to what each execution waits on, in the
same statement as the events that set them, and the statement NOTIFYs the
nearest due time it wrote (channel :data:`~.sql.timers.TIMERS_CHANNEL`). Firing
deletes the due rows under ``FOR UPDATE SKIP LOCKED`` and publishes their
messages before the delete commits: several timer replicas never fire a row
twice, and a publish that fails rolls the delete back.

The LISTEN connection (:class:`~.listen.Listener`) is outside the pool; when
it drops it is opened again, and the listener is told it is back: a
notification may have been missed meanwhile.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence

from orbit_services.store import sql
from orbit_services.store.listen import Listener
from orbit_services.store.pool import Database
from orbit_services.store.rows import DueTimer

Publish = Callable[[Sequence[DueTimer]], Awaitable[None]]

LISTENER_NAME = "orbit-timers"
"""How the LISTEN connection shows in ``pg_stat_activity`` (its ``application_name``)."""


class TimerStore:
    """Due timers (``EventStore.timers``) and the notifications of nearer ones."""

    def __init__(self, database: Database, url: str) -> None:
        self._db = database
        self._url = url
        self._listener: Listener | None = None

    async def fire_due(self, now: int, limit: int, publish: Publish) -> list[DueTimer]:
        """Take the timers due at ``now`` (up to ``limit``), have ``publish`` send their
        firings, and delete them only if it did; the timers fired.

        Raises:
            Exception: Whatever ``publish`` raised (nothing was deleted then).
        """
        async with self._db.transaction() as transaction:
            rows = await transaction.fetch(sql.timers.TAKE_DUE_TIMERS, now=now, limit=limit)
            due = [DueTimer(row["execution_id"], row["key"], int(row["due_at"])) for row in rows]
            if due:
                await publish(due)
        return due

    async def next_due(self) -> int | None:
        """When the next timer is due (epoch ms), or None without timers."""
        value = await self._db.fetchval(sql.timers.NEXT_TIMER_DUE)
        return None if value is None else int(value)

    async def of(self, execution_id: str) -> dict[str, int]:
        """The timers the table holds for an execution, by key (for an execution whose
        state cannot be read: those to clear as it ends)."""
        rows = await self._db.fetch(sql.timers.TIMERS_OF, execution_id=execution_id)
        return {row["key"]: int(row["due_at"]) for row in rows}

    async def listen(self, on_due: Callable[[int], None], on_back: Callable[[], None]) -> None:
        """Call ``on_due(due_at)`` for every nearest due time an append announces, and
        ``on_back()`` whenever a lost LISTEN connection is open again.

        Raises:
            OrbitError: ``UNAVAILABLE`` if the first connection cannot be opened.
        """

        def announced(payload: str) -> None:
            with contextlib.suppress(ValueError):
                on_due(int(payload))

        listener = Listener(self._url, sql.timers.TIMERS_CHANNEL, LISTENER_NAME, announced, on_back)
        await listener.open()
        self._listener = listener

    async def stop_listening(self) -> None:
        """Close the LISTEN connection (hard, if Postgres does not answer in 5 s)."""
        if self._listener is not None:
            await self._listener.close()
            self._listener = None
