"""The store: the only door to Postgres.

Everything Orbit keeps in Postgres goes through here: histories, executions,
definitions, timers, the outbox, worker sessions, the LISTEN connection and
the migrations. Every statement is in :mod:`~orbit_services.store.sql`, a module
per table, with named parameters; asyncpg is imported nowhere else, and its errors are
translated here (:mod:`~orbit_services.store.pool`).

- :class:`EventStore`: appends, reads, definitions; ``.sessions``, ``.timers``
  and ``.outbox`` for the other tables.
- :class:`Store`: what the gateway's start rules and the decider's turn need of
  the store (:mod:`.interface`), so that they run over a plain-Python one too.
- :class:`StateCache`: executions' states, brought up to date from their histories
  (:class:`HistoryUnreadable` for one holding an :class:`UndecodedEvent`).
- :class:`GroupCommit`: appends that arrive together share one statement.
- :class:`OutboxRelay`: publishes what was committed, sweeps what was left behind.
- :func:`migrate`: the numbered SQL migrations.
"""

from orbit_services.store.cache import StateCache
from orbit_services.store.event_store import EventStore
from orbit_services.store.group_commit import GroupCommit
from orbit_services.store.history import HistoryUnreadable, UndecodedEvent
from orbit_services.store.interface import Store
from orbit_services.store.migrate import migrate
from orbit_services.store.outbox import OutboxRelay
from orbit_services.store.rows import (
    Append,
    AppendConflict,
    Backlog,
    DefinitionRow,
    DueTimer,
    ExecutionRow,
    OutboxMessage,
    StaleOutboxRow,
    StoredEvent,
    api_status,
)

__all__ = [
    "Append",
    "AppendConflict",
    "Backlog",
    "DefinitionRow",
    "DueTimer",
    "EventStore",
    "ExecutionRow",
    "GroupCommit",
    "HistoryUnreadable",
    "OutboxMessage",
    "OutboxRelay",
    "StaleOutboxRow",
    "StateCache",
    "Store",
    "StoredEvent",
    "UndecodedEvent",
    "api_status",
    "migrate",
]
