"""The event store: definitions, executions and their histories in Postgres.

The ``(execution_id, seq)`` primary key of ``history`` is the only
concurrency control. :meth:`EventStore.append` writes the events of many
executions, their ``executions`` rows, their timers and the outbox messages
they call for in one statement; if any of them lost a race it raises
:class:`~.rows.AppendConflict` and nothing is written. The caller re-reads,
decides again and retries.

The store's other tables have an object each, sharing the store's private
pool: :attr:`EventStore.sessions` (worker sessions and dispatcher beats),
:attr:`EventStore.timers` (firing, the next due time, LISTEN) and
:attr:`EventStore.outbox` (published rows to delete, rows left behind) and
:attr:`EventStore.leases` (the deciders and their partitions).
:meth:`EventStore.listen_for_endings` tells a gateway which executions ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg

from orbit_model.compiler import Definition, definition_from_ir
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.events import Event
from orbit_model.repeated_starts import RecordedStart
from orbit_services.store import sql
from orbit_services.store.appends import append_values
from orbit_services.store.console import ConsoleReads
from orbit_services.store.history import UndecodedEvent, decoded, unreadable
from orbit_services.store.leases import LeaseStore
from orbit_services.store.listen import Listener
from orbit_services.store.outbox import OutboxStore
from orbit_services.store.pool import IDLE_TRANSACTION_SECONDS, Database
from orbit_services.store.rows import (
    Append,
    AppendConflict,
    Backlog,
    DefinitionRow,
    ExecutionRow,
    StoredEvent,
    execution_row,
)
from orbit_services.store.sessions import SessionStore
from orbit_services.store.snapshots import SnapshotStore
from orbit_services.store.timers import TimerStore
from orbit_services.store.tokens import TokenStore
from orbit_services.store.worker_users import WorkerUsers

log = logging.getLogger("orbit.store")

ENDINGS_LISTENER_NAME = "orbit-endings"
"""How a gateway's LISTEN connection for ended executions shows in ``pg_stat_activity``."""


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _decoded(row: asyncpg.Record) -> Event | UndecodedEvent:
    return decoded(row["seq"], row["recorded_at"], row["type"], row["data"])


class EventStore:
    """Orbit's tables behind a few methods; every statement comes from :mod:`.sql`.

    Build one with :meth:`connect`; :meth:`close` it when done.
    """

    def __init__(self, database: Database, url: str) -> None:
        self._db = database
        self.sessions = SessionStore(database)
        """Worker sessions and dispatcher beats."""
        self.tokens = TokenStore(database)
        """The gateway's API tokens."""
        self.worker_users = WorkerUsers(database)
        """The task patterns of the worker users, as ``orbit broker user add`` gave them."""
        self.console = ConsoleReads(database)
        """What the console reads beyond the API's queries."""
        self._url = url
        self._listeners: list[Listener] = []
        self.timers = TimerStore(database, url)
        """Due timers, the next due time, and the LISTEN connection that announces nearer ones."""
        self.outbox = OutboxStore(database)
        """Outbox rows published and to delete, and rows their writers left behind."""
        self.leases = LeaseStore(database)
        """Which decider holds which partition of the decider queue."""
        self.snapshots = SnapshotStore(database)
        """Executions' last snapshots, read with the events after them."""
        # Definitions never change once registered: whatever was read is kept.
        self._by_hash: dict[str, Definition] = {}
        self._by_ref: dict[tuple[str, str], Definition] = {}

    @classmethod
    async def connect(
        cls,
        url: str,
        min_size: int = 2,
        max_size: int = 10,
        *,
        max_queries: int = 50_000,
        timeout: float | None = None,
        idle_transaction_seconds: float = IDLE_TRANSACTION_SECONDS,
    ) -> EventStore:
        """A store on a new pool; ``max_queries``: served by a connection before it is
        replaced; ``timeout``: the bound of each statement and of the wait for a connection
        (:class:`~.pool.Database`; None: none); ``idle_transaction_seconds``: how long
        Postgres keeps one of its transactions open waiting for this process.

        Raises:
            OrbitError: ``UNAVAILABLE`` when Postgres cannot be reached.
        """
        database = await Database.open(
            url,
            min_size,
            max_size,
            max_queries=max_queries,
            timeout=timeout,
            idle_transaction_seconds=idle_transaction_seconds,
        )
        return cls(database, url)

    async def close(self, timeout: float = 10.0) -> None:
        """Delete what was published and not yet deleted (best effort), then close.

        A pool whose connections are not given back within ``timeout`` seconds
        is terminated: stopping a service must not hang.
        """
        # What cannot be deleted now is left to the sweep, which publishes it once more.
        with contextlib.suppress(Exception):
            async with asyncio.timeout(timeout):
                await self.outbox.flush_published()
        await self.timers.stop_listening()
        for listener in self._listeners:
            await listener.close()
        self._listeners.clear()
        await self._db.close(timeout)

    async def listen_for_endings(
        self, on_ended: Callable[[list[str]], None], on_back: Callable[[], None]
    ) -> Listener:
        """Call ``on_ended(execution_ids)`` as executions end, from a LISTEN connection
        of its own (:data:`.sql.executions.CLOSED_CHANNEL`); ``on_back`` when it was lost and is
        back, for a notification may have been missed. Closed with the store.

        Raises:
            OrbitError: ``UNAVAILABLE`` if Postgres cannot be reached.
        """

        def announced(payload: str) -> None:
            on_ended(payload.split(" "))

        listener = Listener(
            self._url, sql.executions.CLOSED_CHANNEL, ENDINGS_LISTENER_NAME, announced, on_back
        )
        await listener.open()
        self._listeners.append(listener)
        return listener

    async def ping(self) -> None:
        """Returns when Postgres answers; raises ``UNAVAILABLE`` when it does not."""
        await self._db.fetchval(sql.server.PING)

    async def now_ms(self) -> int:
        """Postgres's clock, epoch ms (``runtime.clock.PostgresClock``)."""
        return int(await self._db.fetchval(sql.server.NOW_MS))

    async def expire_connections(self) -> None:
        """Replace every pooled connection as it is next released (after a failover, say)."""
        await self._db.expire_connections()

    # -- appending -------------------------------------------------------------

    async def append(self, appends: Sequence[Append]) -> list[int]:
        """Write every append in one transaction; the ids of the outbox rows written,
        in the order of the appends' messages.

        Raises:
            AppendConflict: Some execution already had events past ``expected_seq``
                (or, for a new one, already existed), or a concurrent append held
                rows this one needed (a deadlock). Nothing was written.
            OrbitError: ``UNAVAILABLE`` while Postgres is away; ``INVALID_REQUEST``
                for a value it cannot store.
        """
        if not appends:
            return []
        # The outbox rows published since the last append are deleted in this one.
        with self.outbox.deleting() as published:
            try:
                row = await self._db.fetchrow(
                    sql.history.APPEND, **append_values(appends, published)
                )
            except OrbitError as error:
                if error.code is ErrorCode.CONFLICT:
                    raise AppendConflict([a.execution_id for a in appends]) from None
                raise
        assert row is not None  # the statement always answers one row
        return list(row["outbox_ids"])

    # -- reading ---------------------------------------------------------------

    async def read_events(self, execution_id: str, after_seq: int = 0) -> list[StoredEvent]:
        """The events of an execution after ``after_seq``, in order.

        Raises:
            OrbitError: ``HISTORY_UNREADABLE`` when one of them no longer decodes
                (:meth:`read_history` shows it as stored).
        """
        stored = await self.read_history(execution_id, after_seq)
        for item in stored:
            if isinstance(item, UndecodedEvent):
                raise OrbitError(ErrorCode.HISTORY_UNREADABLE, unreadable(execution_id, item))
        return [item for item in stored if isinstance(item, StoredEvent)]

    async def read_history(
        self, execution_id: str, after_seq: int = 0
    ) -> list[StoredEvent | UndecodedEvent]:
        """The events of an execution after ``after_seq``, in order; one that no longer
        decodes comes as it is stored (what the gateway's history shows)."""
        rows = await self._db.fetch(
            sql.history.READ_EVENTS, execution_id=execution_id, after_seq=after_seq
        )
        stored: list[StoredEvent | UndecodedEvent] = []
        for row in rows:
            event = _decoded(row)
            if isinstance(event, UndecodedEvent):
                stored.append(event)
            else:
                stored.append(StoredEvent(row["seq"], row["recorded_at"], event))
        return stored

    async def execution(self, execution_id: str) -> ExecutionRow | None:
        row = await self._db.fetchrow(sql.executions.EXECUTION_BY_ID, execution_id=execution_id)
        if row is None:
            return None
        return execution_row(
            row,
            input=_loads(row["input"]),
            output=_loads(row["output"]),
            error=_loads(row["error"]),
            last_seq=row["last_seq"],
        )

    async def list_executions(
        self,
        status: str | None = None,
        workflow: str | None = None,
        before: int | None = None,
        limit: int = 50,
        like_any: list[str] | None = None,
    ) -> list[ExecutionRow]:
        """Executions newest first; ``before`` is the position the last page ended at;
        ``like_any``: only those whose workflow matches one of these ``LIKE`` patterns."""
        rows = await self._db.fetch(
            sql.executions.LIST_EXECUTIONS,
            status=status,
            workflow=workflow,
            before=before,
            limit=limit,
            workflows=like_any,
        )
        return [execution_row(row) for row in rows]

    async def recorded_starts(self, execution_ids: Sequence[str]) -> dict[str, RecordedStart]:
        """How each of these executions that exists was started."""
        rows = await self._db.fetch(
            sql.executions.EXISTING_EXECUTIONS, execution_ids=list(execution_ids)
        )
        return {
            row["execution_id"]: RecordedStart(
                workflow=row["workflow"],
                version=row["version"],
                definition_hash=row["definition_hash"],
                input=_loads(row["input"]),
            )
            for row in rows
        }

    async def count_running(self) -> int:
        return int(await self._db.fetchval(sql.executions.COUNT_RUNNING))

    async def active_executions(self) -> dict[str, int]:
        """Executions created or running, by workflow."""
        rows = await self._db.fetch(sql.gauges.ACTIVE_EXECUTIONS_BY_WORKFLOW)
        return {row["workflow"]: int(row["active"]) for row in rows}

    async def backlog(self, now_ms: int) -> Backlog:
        """What waits to be done: timers due by ``now_ms`` and the outbox."""
        row = await self._db.fetchrow(sql.gauges.BACKLOG, now=now_ms)
        assert row is not None  # one row of sub-selects
        oldest = row["outbox_oldest_s"]
        return Backlog(
            timers_due=int(row["timers_due"]),
            outbox_depth=int(row["outbox_depth"]),
            outbox_oldest_seconds=max(float(oldest), 0.0) if oldest is not None else 0.0,
        )

    # -- definitions -----------------------------------------------------------

    async def register_definition(self, definition: Definition, source: str | None = None) -> bool:
        """Store a definition; True if new, False if this very one was there.

        ``source``: the YAML it was compiled from, kept as sent for people to read.

        Raises:
            OrbitError: ``DEFINITION_CONFLICT`` when its name and version hold another one.
        """
        ir = definition.ir
        status = await self._db.execute(
            sql.definitions.INSERT_DEFINITION,
            name=ir.name,
            version=ir.version,
            hash=definition.hash,
            ir=ir.canonical_json(),
            source=source,
        )
        if status.endswith(" 1"):
            self._remember(definition)
            return True
        existing = await self._db.fetchrow(
            sql.definitions.DEFINITION_BY_NAME_VERSION, name=ir.name, version=ir.version
        )
        if existing is not None and existing["hash"] == definition.hash:
            return False
        other = existing["hash"] if existing is not None else "unknown"
        raise OrbitError(
            ErrorCode.DEFINITION_CONFLICT,
            f"{ir.name}@{ir.version} is already registered with a different definition"
            f" ({other}); workflow definitions are immutable, bump the version",
        )

    async def definition(self, name: str, version: str) -> Definition | None:
        """The definition registered as ``name@version`` (read once, then kept)."""
        known = self._by_ref.get((name, version))
        if known is not None:
            return known
        row = await self._db.fetchrow(
            sql.definitions.DEFINITION_BY_NAME_VERSION, name=name, version=version
        )
        return None if row is None else self._remember(definition_from_ir(row["ir"], limits=False))

    async def definition_by_hash(self, definition_hash: str) -> Definition | None:
        """The definition whose hash is ``definition_hash`` (read once, then kept)."""
        known = self._by_hash.get(definition_hash)
        if known is not None:
            return known
        row = await self._db.fetchrow(sql.definitions.DEFINITION_BY_HASH, hash=definition_hash)
        return None if row is None else self._remember(definition_from_ir(row["ir"], limits=False))

    def _remember(self, definition: Definition) -> Definition:
        self._by_hash[definition.hash] = definition
        self._by_ref[definition.ir.name, definition.ir.version] = definition
        return definition

    async def definition_versions(self, name: str) -> list[str]:
        return [
            row["version"]
            for row in await self._db.fetch(sql.definitions.DEFINITION_VERSIONS, name=name)
        ]

    async def list_definitions(self) -> list[DefinitionRow]:
        rows = await self._db.fetch(sql.definitions.LIST_DEFINITIONS)
        return [
            DefinitionRow(row["name"], row["version"], row["hash"], row["registered_at"])
            for row in rows
        ]

    async def task_versions_in_use(self) -> dict[str, set[str]]:
        """Task name to the contract versions the registered workflows call it at."""
        used: dict[str, set[str]] = {}
        for row in await self._db.fetch(sql.definitions.TASK_VERSIONS_IN_USE):
            used.setdefault(row["task"], set()).add(row["version"])
        return used
