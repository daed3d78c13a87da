"""The store's connections to Postgres, and the one place driver errors become OrbitErrors.

The pool is private to the store: nothing else in Orbit opens a connection
(import-linter keeps asyncpg to this package). Every statement goes through
:class:`Database`, which passes named parameters (:mod:`.statements`),
counts statements, and translates what asyncpg raises:

- the connection is lost, refused or the server shuts down, Postgres runs out of
  a resource (disk, memory, files: SQLSTATE class 53), an operator or the system
  stops a statement (classes 57 and 58), the server turned read-only (a standby
  after a failover), or no answer comes within the pool's timeout:
  ``UNAVAILABLE`` (none of it is the statement's fault; the caller may try
  again later, and a client is answered 503);
- a value Postgres cannot store (a NUL character, a number out of range):
  ``INVALID_REQUEST``;
- anything else Postgres refuses: ``INTERNAL``, a bug.

- a unique violation, a deadlock or a serialization failure: ``CONFLICT``,
  a race lost (an append turns it into :class:`~.rows.AppendConflict`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg

from orbit_model.errors import ErrorCode, OrbitError, unreachable
from orbit_services.runtime import metrics
from orbit_services.store.statements import Statement

log = logging.getLogger("orbit.store")

APPLICATION_NAME = "orbit"
"""How Orbit's connections show in ``pg_stat_activity``."""

# The connection went away, or never came: Postgres may be back later.
_UNAVAILABLE: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.CannotConnectNowError,
    asyncpg.TooManyConnectionsError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
)


_TRANSIENT_CLASSES = ("08", "53", "57", "58")
"""SQLSTATE classes of a server that is, for now, unable: connection exceptions,
insufficient resources, operator intervention, system errors."""
_TRANSIENT_STATES = frozenset({"25006"})
"""read_only_sql_transaction: a primary that became a standby (a failover)."""


def _transient(error: asyncpg.PostgresError) -> bool:
    state = getattr(error, "sqlstate", None) or ""
    return state.startswith(_TRANSIENT_CLASSES) or state in _TRANSIENT_STATES


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Turn what asyncpg raises inside into an :class:`OrbitError` (the module's rules)."""
    try:
        yield
    except OrbitError:
        raise
    except TimeoutError as error:
        raise OrbitError(
            ErrorCode.UNAVAILABLE,
            "Postgres did not answer within the time allowed",
        ) from error
    except _UNAVAILABLE as error:
        raise OrbitError(ErrorCode.UNAVAILABLE, f"Postgres is unavailable: {error!r}") from error
    except (
        asyncpg.UniqueViolationError,
        asyncpg.DeadlockDetectedError,
        asyncpg.SerializationError,
    ) as error:
        raise OrbitError(ErrorCode.CONFLICT, f"a concurrent write won: {error}") from error
    except asyncpg.DataError as error:
        raise OrbitError(
            ErrorCode.INVALID_REQUEST, f"Postgres cannot store a value: {error}"
        ) from error
    except asyncpg.PostgresError as error:
        if _transient(error):
            raise OrbitError(
                ErrorCode.UNAVAILABLE, f"Postgres cannot serve now: {error!r}"
            ) from error
        raise OrbitError(ErrorCode.INTERNAL, f"Postgres refused a statement: {error!r}") from error


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


IDLE_TRANSACTION_SECONDS = 10.0
"""How long Postgres keeps a transaction of an Orbit process open while it waits for
that process's next statement; past it Postgres ends the session, and its row locks go.

A process cut off silently in the middle of a transaction (a network partition drops
packets and closes nothing) would otherwise leave the transaction open on the server
for as long as the cut lasts, and with it the locks it took: a decider's lease row,
which every other decider's claim skips (``SKIP LOCKED``), or outbox rows and timers
that other sweeps skip. No Orbit transaction waits on its process for long: between
its statements there is at most a publish to RabbitMQ (an outbox sweep, a timer's
firing). One that outlasts this (a blocked broker) ends the transaction unfinished,
and the sweep takes the same rows again later: their work is at least once."""


class Database:
    """A pool of connections to one database, used by every part of the store.

    Args:
        pool: The pool, opened by :meth:`open`.
        timeout: Seconds a statement, or the wait for a connection to run it on, may
            take; past it ``UNAVAILABLE`` (None: no bound).
    """

    def __init__(self, pool: asyncpg.Pool, timeout: float | None = None) -> None:
        self._pool = pool
        self._timeout = timeout

    @classmethod
    async def open(
        cls,
        url: str,
        min_size: int = 2,
        max_size: int = 10,
        *,
        max_queries: int = 50_000,
        timeout: float | None = None,
        idle_transaction_seconds: float = IDLE_TRANSACTION_SECONDS,
    ) -> Database:
        """A pool on ``url``; ``max_queries``: served by a connection before it is replaced;
        ``timeout``: the bound of each statement and of the wait for a connection (a
        frozen or silent server answers nothing, and would hold every caller);
        ``idle_transaction_seconds``: how long Postgres keeps one of its transactions
        open waiting for this process (:data:`IDLE_TRANSACTION_SECONDS`).

        Raises:
            OrbitError: ``UNAVAILABLE`` when Postgres cannot be reached.
        """
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
                server_settings={
                    "application_name": APPLICATION_NAME,
                    "idle_in_transaction_session_timeout": str(
                        max(1, round(idle_transaction_seconds * 1000))
                    ),
                },
                command_timeout=timeout,
            )
        except (OSError, asyncpg.PostgresError) as error:
            raise unreachable("Postgres", url, error) from error
        return cls(pool, timeout)

    async def close(self, timeout: float) -> None:
        """Close the pool; one whose connections are not given back within ``timeout``
        seconds (a query whose cancellation Postgres never answered) is terminated."""
        try:
            async with asyncio.timeout(timeout):
                await self._pool.close()
        except TimeoutError:
            log.warning(
                "Postgres connections were not given back in %.0f s; closing them hard",
                timeout,
                extra={"action": "store.close_timeout"},
            )
            self._pool.terminate()

    async def fetch(self, statement: Statement, **values: Any) -> list[asyncpg.Record]:
        with translated():
            async with self._pool.acquire(timeout=self._timeout) as connection:
                return list(await connection.fetch(statement.text, *statement.args(**values)))

    async def fetchrow(self, statement: Statement, **values: Any) -> asyncpg.Record | None:
        with translated():
            async with self._pool.acquire(timeout=self._timeout) as connection:
                return await connection.fetchrow(statement.text, *statement.args(**values))

    async def fetchval(
        self, statement: Statement, *, timeout: float | None = None, **values: Any
    ) -> Any:
        with translated():
            async with self._pool.acquire(timeout=self._timeout) as connection:
                return await connection.fetchval(
                    statement.text, *statement.args(**values), timeout=timeout or self._timeout
                )

    async def execute(
        self, statement: Statement, *, timeout: float | None = None, **values: Any
    ) -> str:
        with translated():
            async with self._pool.acquire(timeout=self._timeout) as connection:
                arguments = statement.args(**values)
                timeout = timeout or self._timeout
                return str(await connection.execute(statement.text, *arguments, timeout=timeout))

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """A connection in a transaction: committed when the block ends, rolled back if it raises.

        Only the store's own work is translated: an error the block raises (a
        publish that failed) comes out as it was, after the rollback.
        """
        with translated():
            connection = await self._pool.acquire(timeout=self._timeout)
        try:
            with translated():
                transaction = connection.transaction()
                await transaction.start()
            try:
                yield Transaction(connection)
            except BaseException:
                with contextlib.suppress(Exception):  # the connection may be gone
                    await transaction.rollback()
                raise
            with translated():
                await transaction.commit()
        finally:
            await self._pool.release(connection)

    async def expire_connections(self) -> None:
        """Replace every pooled connection as it is next released (after a failover, say)."""
        await self._pool.expire_connections()


class Transaction:
    """The statements of one transaction (see :meth:`Database.transaction`)."""

    def __init__(self, connection: asyncpg.Connection | asyncpg.pool.PoolConnectionProxy) -> None:
        self._connection = connection

    async def fetch(self, statement: Statement, **values: Any) -> list[asyncpg.Record]:
        with translated():
            return list(await self._connection.fetch(statement.text, *statement.args(**values)))

    async def execute(self, statement: Statement, **values: Any) -> str:
        with translated():
            return str(await self._connection.execute(statement.text, *statement.args(**values)))
