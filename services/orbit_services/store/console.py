"""What the console reads that the API does not (``EventStore.console``).

The executions list filters by start time and by id prefix, and counts the
executions of each status under the same filters; the definitions page shows
the YAML a definition was registered from. bench/console.py measures the
list at 100,000 executions: the page walks ``executions_by_position`` newest
first and stops at its limit (0.04 ms); the counts read the whole table (a
sequential scan, 24 ms at 100,000 rows, and linear in them: the first thing
to change past a million executions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from orbit_services.store import sql
from orbit_services.store.pool import Database
from orbit_services.store.rows import ExecutionRow, execution_row


@dataclass(frozen=True)
class ListFilter:
    """What the executions list is narrowed to; None: not narrowed by that."""

    workflow: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    id_prefix: str | None = None
    like_any: Sequence[str] | None = None
    """``LIKE`` patterns of the workflows a narrowed token may see."""

    def values(self) -> dict[str, object]:
        return {
            "workflow": self.workflow,
            "workflows": None if self.like_any is None else list(self.like_any),
            "since": self.since,
            "until": self.until,
            "prefix": self.id_prefix,
        }


class ConsoleReads:
    """The console's queries over one database."""

    def __init__(self, database: Database) -> None:
        self._db = database

    async def page(
        self, where: ListFilter, status: str | None, before: int | None, limit: int
    ) -> list[ExecutionRow]:
        """Up to ``limit`` executions newest first, older than position ``before``."""
        rows = await self._db.fetch(
            sql.console.LIST_PAGE, **where.values(), status=status, before=before, limit=limit
        )
        return [execution_row(record) for record in rows]

    async def counts(self, where: ListFilter) -> dict[str, int]:
        """How many executions of each status the filter lets through."""
        rows = await self._db.fetch(sql.console.COUNT_BY_STATUS, **where.values())
        return {record["status"]: int(record["n"]) for record in rows}

    async def executions(self, ids: Sequence[str]) -> list[ExecutionRow]:
        """Those of ``ids`` that exist, oldest first."""
        rows = await self._db.fetch(sql.console.EXECUTIONS_BY_ID, ids=list(ids))
        return [execution_row(record) for record in rows]

    async def definition_source(self, name: str, version: str) -> str | None:
        """The YAML ``name@version`` was registered from; None if it came as IR."""
        value = await self._db.fetchval(sql.console.DEFINITION_SOURCE, name=name, version=version)
        return None if value is None else str(value)
