"""Every SQL statement Orbit runs, named for what it does, a module per table.

A caller names the table's module: ``sql.history.APPEND``, ``sql.tokens.TOKEN_GRANT``.
Parameters are named (``:execution_id``, :mod:`orbit_services.store.statements`).
Batched writes take arrays and ``unnest`` them, so that appending the events of many
executions is one statement, whatever the batch size.

- :mod:`.history`: the one append (every table an execution's turn writes) and the
  reads of events, from the last snapshot or not.
- :mod:`.executions`, :mod:`.definitions`, :mod:`.timers`, :mod:`.outbox`,
  :mod:`.sessions` (worker sessions and dispatcher beats), :mod:`.leases` (deciders
  and their partitions), :mod:`.tokens`, :mod:`.console_sessions`,
  :mod:`.worker_users`, :mod:`.migrations`: a table or two each.
- :mod:`.console`: what the console reads beyond the API; :mod:`.gauges`: what the
  timer service's gauges read; :mod:`.server`: whether Postgres answers, its clock.
"""

from orbit_services.store.sql import (
    console,
    console_sessions,
    definitions,
    executions,
    gauges,
    history,
    leases,
    migrations,
    outbox,
    server,
    sessions,
    timers,
    tokens,
    worker_users,
)

__all__ = [
    "console",
    "console_sessions",
    "definitions",
    "executions",
    "gauges",
    "history",
    "leases",
    "migrations",
    "outbox",
    "server",
    "sessions",
    "timers",
    "tokens",
    "worker_users",
]
