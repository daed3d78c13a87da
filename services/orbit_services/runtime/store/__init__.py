"""The store: the only door to Postgres.

Everything Orbit keeps in Postgres goes through here: histories, executions,
definitions, timers, the outbox, worker sessions, the LISTEN connection and
the migrations. Every statement is in :mod:`~orbit_services.runtime.store.sql`;
asyncpg is imported nowhere else, and its errors are translated here.
"""

from orbit_services.runtime.store.event_store import (
    Append,
    AppendConflict,
    Backlog,
    DefinitionRow,
    EventStore,
    ExecutionRow,
    OutboxMessage,
    StoredEvent,
    api_status,
)

__all__ = [
    "Append",
    "AppendConflict",
    "Backlog",
    "DefinitionRow",
    "EventStore",
    "ExecutionRow",
    "OutboxMessage",
    "StoredEvent",
    "api_status",
]
