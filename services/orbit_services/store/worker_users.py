"""The task patterns of the worker users (``EventStore.worker_users``).

``orbit broker user add --role worker --tasks PATTERN`` records them here as
well as in RabbitMQ's permissions, where only the broker's administrator can
read them; the dispatcher reads them to refuse at registration a contract
its worker's user could not consume (docs/protocol.md, 6.5).
"""

from __future__ import annotations

from collections.abc import Sequence

from orbit_services.store import sql
from orbit_services.store.pool import Database


class WorkerUsers:
    """Each worker user's task patterns, by its RabbitMQ user name."""

    def __init__(self, database: Database) -> None:
        self._db = database

    async def record(self, name: str, tasks: Sequence[str]) -> None:
        """Record (or replace) the patterns of the worker user ``name``."""
        await self._db.execute(sql.worker_users.RECORD, name=name, tasks=list(tasks))

    async def forget(self, name: str) -> None:
        await self._db.execute(sql.worker_users.FORGET, name=name)

    async def tasks_of(self, name: str) -> tuple[str, ...] | None:
        """The patterns of the worker user ``name``; None when none were recorded."""
        found = await self._db.fetchval(sql.worker_users.TASKS_OF, name=name)
        return None if found is None else tuple(found)
