"""The event store: definitions, executions and their histories in Postgres.

The ``(execution_id, seq)`` primary key of ``history`` is the only
concurrency control. :meth:`EventStore.append` writes the events of many
executions, their ``executions`` rows, their timers and the outbox messages
they call for in one transaction; if any of them lost a race it raises
:class:`AppendConflict` and nothing is written. The caller re-reads, decides
again and retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Self

import asyncpg

from orbit_model.compiler import Definition, definition_from_ir
from orbit_model.errors import ErrorCode, OrbitError, unreachable
from orbit_model.events import Event, event_from_json, event_to_json
from orbit_model.state import ExecutionState
from orbit_services.runtime import metrics
from orbit_services.runtime.store import sql


class AppendConflict(OrbitError):
    """Another writer appended to these executions first: re-read, decide again (``CONFLICT``)."""

    def __init__(self, execution_ids: Sequence[str]) -> None:
        super().__init__(ErrorCode.CONFLICT, f"concurrent append to {', '.join(execution_ids)}")
        self.execution_ids = tuple(execution_ids)


log = logging.getLogger("orbit.store")


@dataclass(frozen=True)
class OutboxMessage:
    """A message to publish once the transaction that wrote it commits."""

    exchange: str
    routing_key: str
    body: bytes
    headers: Mapping[str, str] | None = None
    """AMQP headers (a task's ``traceparent``)."""


@dataclass(frozen=True)
class Append:
    """New events of one execution, and what they change around them.

    Attributes:
        execution_id: The execution.
        expected_seq: The last seq the writer had read; the events take the next ones.
        events: The events, in order.
        state: The execution's state after them.
        timers_before: The state's timers before them, to write only the difference.
        outbox: Messages the events call for.
    """

    execution_id: str
    expected_seq: int
    events: Sequence[Event]
    state: ExecutionState
    timers_before: Mapping[str, int] = field(default_factory=dict)
    outbox: Sequence[OutboxMessage] = ()


@dataclass(frozen=True)
class StoredEvent:
    seq: int
    recorded_at: datetime
    event: Event


@dataclass(frozen=True)
class ExecutionRow:
    """One line of ``executions``: what listing and lookup need without a replay."""

    execution_id: str
    position: int
    workflow: str
    version: str
    definition_hash: str
    status: str
    parent: str | None
    created_at: datetime
    closed_at: datetime | None
    input: Any = None
    output: Any = None
    error: Any = None
    last_seq: int = 0


@dataclass(frozen=True)
class DefinitionRow:
    name: str
    version: str
    hash: str
    registered_at: datetime


def api_status(state: ExecutionState) -> str:
    """The status clients see: an execution not yet decided on is already running."""
    return "running" if state.status in ("new", "created") else state.status


def _json_or_none(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


@dataclass(frozen=True)
class Backlog:
    timers_due: int
    """Timers whose due time has passed and that have not fired yet."""
    outbox_depth: int
    """Outbox rows not yet published (normally published within milliseconds)."""
    outbox_oldest_seconds: float
    """Age of the oldest outbox row; 0 when there is none."""


async def _keep_session(_connection: asyncpg.Connection) -> None:
    """Release without resetting the session (asyncpg still rolls back an open transaction)."""


class _WatchedConnection(asyncpg.Connection):
    """A pooled connection that knows whether it was closed on purpose."""

    closed_on_purpose = False

    async def close(self, *, timeout: float | None = None) -> None:
        self.closed_on_purpose = True
        await super().close(timeout=timeout)

    def terminate(self) -> None:
        self.closed_on_purpose = True
        super().terminate()


def _count_statement(_query: object) -> None:
    metrics.POSTGRES_STATEMENTS.inc()


class _ConnectionWatch:
    """Counts a pool's Postgres connections lost, and the reconnects after them (and,
    through a query logger on each connection, the statements sent).

    Every connection the pool opens gets a termination listener. The pool's
    own closes (an idle connection retired, a query budget spent,
    ``expire_connections``, a failed reset) and ours go through ``close`` or
    ``terminate``, which mark the connection; a connection that ends
    unmarked was lost. The next connection the pool opens after a loss is a
    reconnect.
    """

    def __init__(self) -> None:
        self._unanswered_losses = 0

    async def on_connect(self, connection: asyncpg.Connection) -> None:
        if self._unanswered_losses:
            self._unanswered_losses -= 1
            metrics.POSTGRES_RECONNECTS.inc()
        connection.add_termination_listener(lambda _: self._on_terminated(connection))
        connection.add_query_logger(_count_statement)

    def _on_terminated(self, connection: asyncpg.Connection) -> None:
        if not getattr(connection, "closed_on_purpose", False):
            self._unanswered_losses += 1
            metrics.POSTGRES_CONNECTION_LOSSES.inc()


class EventStore:
    """Orbit's tables behind a few methods; every statement comes from :mod:`.sql`."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self._published: list[int] = []
        """Outbox rows published already, deleted with the next append (or a flush)."""

    @classmethod
    async def connect(
        cls, url: str, min_size: int = 2, max_size: int = 10, *, max_queries: int = 50_000
    ) -> Self:
        """A store on a new pool; ``max_queries``: served by a connection before it is replaced."""
        watch = _ConnectionWatch()
        try:
            pool = await asyncpg.create_pool(
                url,
                min_size=min_size,
                max_size=max_size,
                max_queries=max_queries,
                connection_class=_WatchedConnection,
                init=watch.on_connect,
                # Orbit keeps no session state on pooled connections (no SET, LISTEN
                # or advisory lock): releasing one only rolls back what is open,
                # without asyncpg's reset query, a round trip per acquire.
                reset=_keep_session,
            )
        except (OSError, asyncpg.PostgresError) as error:
            raise unreachable("Postgres", url, error) from error
        return cls(pool)

    async def close(self, timeout: float = 10.0) -> None:
        """Delete what was published and not yet deleted (best effort), then close.

        A pool whose connections are not given back within ``timeout`` seconds
        (a query whose cancellation Postgres never answered) is terminated:
        stopping a service must not hang.
        """
        # What cannot be deleted now is left to the sweep, which publishes it once more.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.flush_published(), timeout)
        try:
            await asyncio.wait_for(self.pool.close(), timeout)
        except TimeoutError:
            log.warning(
                "Postgres connections were not given back in %.0f s; closing them hard",
                timeout,
                extra={"action": "store.close_timeout"},
            )
            self.pool.terminate()

    async def ping(self) -> None:
        await self.pool.fetchval("SELECT 1")

    # -- appending -------------------------------------------------------------

    async def append(self, appends: Sequence[Append]) -> list[int]:
        """Write every append in one transaction; the ids of the outbox rows written,
        in the order of the appends' messages.

        Raises:
            AppendConflict: Some execution already had events past ``expected_seq``
                (or, for a new one, already existed), or a concurrent append held
                rows this one needed (a deadlock). Nothing was written.
        """
        if not appends:
            return []
        # The outbox rows published since the last append go in this transaction.
        published, self._published = self._published, []
        try:
            return await self._append(appends, published)
        except BaseException:
            self._published = published + self._published  # not deleted: next time
            raise

    async def _append(self, appends: Sequence[Append], published: list[int]) -> list[int]:
        # Rows are written in execution id order, so that two appends touching the
        # same executions (a decider batch, a gateway group) lock them in the same
        # order; the outbox keeps the order of the messages.
        ordered = sorted(appends, key=lambda a: a.execution_id)
        # An append may carry only outbox messages (no events): it touches no row.
        new = [a for a in ordered if a.events and a.expected_seq == 0]
        old = [a for a in ordered if a.events and a.expected_seq > 0]
        upserts, deletes = _timer_changes(ordered)
        outbox = [message for a in appends for message in a.outbox]
        try:
            row = await self.pool.fetchrow(
                sql.APPEND,
                *_event_columns(ordered),
                *_new_execution_columns(new),
                *_execution_columns(old),
                *upserts,
                *deletes,
                published,
                [m.exchange for m in outbox],
                [m.routing_key for m in outbox],
                [m.body for m in outbox],
                [_json_or_none(dict(m.headers)) if m.headers else None for m in outbox],
                str(min(upserts[2])) if upserts[2] else None,
            )
        except (
            asyncpg.UniqueViolationError,
            # Another writer held rows this one needed, and the other way round:
            # decided again, like any race lost.
            asyncpg.DeadlockDetectedError,
            asyncpg.SerializationError,
        ):
            raise AppendConflict([a.execution_id for a in appends]) from None
        assert row is not None  # the statement always answers one row
        return list(row["outbox_ids"])

    # -- reading ---------------------------------------------------------------

    async def read_events(self, execution_id: str, after_seq: int = 0) -> list[StoredEvent]:
        """The events of an execution after ``after_seq``, in order."""
        rows = await self.pool.fetch(sql.READ_EVENTS, execution_id, after_seq)
        return [
            StoredEvent(row["seq"], row["recorded_at"], event_from_json(row["data"]))
            for row in rows
        ]

    async def read_new_events(self, after: Mapping[str, int]) -> dict[str, list[Event]]:
        """For each execution, its events after the seq given for it (one query for all)."""
        found: dict[str, list[Event]] = {execution_id: [] for execution_id in after}
        if not after:
            return found
        rows = await self.pool.fetch(sql.READ_EVENTS_MANY, list(after), list(after.values()))
        for row in rows:
            found[row["execution_id"]].append(event_from_json(row["data"]))
        return found

    async def execution(self, execution_id: str) -> ExecutionRow | None:
        row = await self.pool.fetchrow(sql.EXECUTION_BY_ID, execution_id)
        if row is None:
            return None
        return _execution_row(
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
    ) -> list[ExecutionRow]:
        """Executions newest first; ``before`` is the position the last page ended at."""
        rows = await self.pool.fetch(sql.LIST_EXECUTIONS, status, workflow, before, limit)
        return [_execution_row(row) for row in rows]

    async def count_running(self) -> int:
        return int(await self.pool.fetchval(sql.COUNT_RUNNING))

    async def active_executions(self) -> dict[str, int]:
        """Executions created or running, by workflow."""
        rows = await self.pool.fetch(sql.ACTIVE_EXECUTIONS_BY_WORKFLOW)
        return {row["workflow"]: int(row["active"]) for row in rows}

    async def backlog(self, now_ms: int) -> Backlog:
        """What waits to be done: timers due by ``now_ms`` and the outbox."""
        row = await self.pool.fetchrow(sql.BACKLOG, now_ms)
        assert row is not None  # one row of sub-selects
        oldest = row["outbox_oldest_s"]
        return Backlog(
            timers_due=int(row["timers_due"]),
            outbox_depth=int(row["outbox_depth"]),
            outbox_oldest_seconds=max(float(oldest), 0.0) if oldest is not None else 0.0,
        )

    # -- definitions -----------------------------------------------------------

    async def register_definition(self, definition: Definition) -> bool:
        """Store a definition; True if new, False if this very one was there.

        Raises:
            OrbitError: ``DEFINITION_CONFLICT`` when its name and version hold another one.
        """
        ir = definition.ir
        status = await self.pool.execute(
            sql.INSERT_DEFINITION, ir.name, ir.version, definition.hash, ir.canonical_json()
        )
        if status.endswith(" 1"):
            return True
        existing = await self.pool.fetchrow(sql.DEFINITION_BY_NAME_VERSION, ir.name, ir.version)
        if existing is not None and existing["hash"] == definition.hash:
            return False
        other = existing["hash"] if existing is not None else "unknown"
        raise OrbitError(
            ErrorCode.DEFINITION_CONFLICT,
            f"{ir.name}@{ir.version} is already registered with a different definition"
            f" ({other}); workflow definitions are immutable, bump the version",
        )

    async def definition(self, name: str, version: str) -> Definition | None:
        row = await self.pool.fetchrow(sql.DEFINITION_BY_NAME_VERSION, name, version)
        return None if row is None else definition_from_ir(row["ir"])

    async def definition_by_hash(self, definition_hash: str) -> Definition | None:
        row = await self.pool.fetchrow(sql.DEFINITION_BY_HASH, definition_hash)
        return None if row is None else definition_from_ir(row["ir"])

    async def definition_versions(self, name: str) -> list[str]:
        return [row["version"] for row in await self.pool.fetch(sql.DEFINITION_VERSIONS, name)]

    async def list_definitions(self) -> list[DefinitionRow]:
        rows = await self.pool.fetch(sql.LIST_DEFINITIONS)
        return [
            DefinitionRow(row["name"], row["version"], row["hash"], row["registered_at"])
            for row in rows
        ]

    async def task_versions_in_use(self) -> dict[str, set[str]]:
        """Task name to the contract versions the registered workflows call it at."""
        used: dict[str, set[str]] = {}
        for row in await self.pool.fetch(sql.TASK_VERSIONS_IN_USE):
            used.setdefault(row["task"], set()).add(row["version"])
        return used

    # -- outbox ----------------------------------------------------------------

    def outbox_published(self, ids: Sequence[int]) -> None:
        """Rows the relay published: deleted in the next append's transaction, so a
        step costs no transaction of its own for them (or by :meth:`flush_published`)."""
        self._published.extend(ids)

    async def flush_published(self) -> int:
        """Delete the published rows no append took along; how many."""
        published, self._published = self._published, []
        if not published:
            return 0
        try:
            await self.pool.execute(sql.DELETE_OUTBOX, published)
        except BaseException:
            self._published = published + self._published
            raise
        return len(published)


def _execution_row(row: asyncpg.Record, **details: Any) -> ExecutionRow:
    """The columns a listing reads, plus what a lookup adds (``details``)."""
    return ExecutionRow(
        execution_id=row["execution_id"],
        position=row["position"],
        workflow=row["workflow"],
        version=row["version"],
        definition_hash=row["definition_hash"],
        status=row["status"],
        parent=row["parent"],
        created_at=row["created_at"],
        closed_at=row["closed_at"],
        **details,
    )


def _event_columns(appends: Sequence[Append]) -> tuple[list[Any], ...]:
    ids: list[str] = []
    seqs: list[int] = []
    types: list[str] = []
    data: list[str] = []
    for append in appends:
        for offset, event in enumerate(append.events, start=1):
            ids.append(append.execution_id)
            seqs.append(append.expected_seq + offset)
            types.append(event.type)
            data.append(event_to_json(event))
    return ids, seqs, types, data


def _new_execution_columns(appends: Sequence[Append]) -> tuple[list[Any], ...]:
    states = [a.state for a in appends]
    return (
        [a.execution_id for a in appends],
        [s.workflow for s in states],
        [s.version for s in states],
        [s.definition_hash for s in states],
        [api_status(s) for s in states],
        [s.parent for s in states],
        [_json_or_none(s.input) for s in states],
        [a.expected_seq + len(a.events) for a in appends],
        [_json_or_none(s.output) for s in states],
        [None if s.error is None else s.error.model_dump_json() for s in states],
        [s.terminal for s in states],
    )


def _execution_columns(appends: Sequence[Append]) -> tuple[list[Any], ...]:
    states = [a.state for a in appends]
    return (
        [a.execution_id for a in appends],
        [api_status(s) for s in states],
        [_json_or_none(s.output) for s in states],
        [None if s.error is None else s.error.model_dump_json() for s in states],
        [a.expected_seq + len(a.events) for a in appends],
        [s.terminal for s in states],
    )


def _timer_changes(
    appends: Sequence[Append],
) -> tuple[tuple[list[Any], list[str], list[int]], tuple[list[str], list[str]]]:
    upsert: tuple[list[Any], list[str], list[int]] = ([], [], [])
    delete: tuple[list[str], list[str]] = ([], [])
    for append in appends:
        after = append.state.timers
        for key, due in after.items():
            if append.timers_before.get(key) != due:
                upsert[0].append(append.execution_id)
                upsert[1].append(key)
                upsert[2].append(due)
        for key in append.timers_before.keys() - after.keys():
            delete[0].append(append.execution_id)
            delete[1].append(key)
    return upsert, delete
