"""The statements of ``executions``, a row per execution
(:mod:`orbit_services.store.event_store`; the append writes the rows: :mod:`.history`).
"""

from __future__ import annotations

from orbit_services.store.statements import Statement

S = Statement.named

EXECUTION_BY_ID = S("""
SELECT execution_id, position, workflow, version, definition_hash, status, parent,
       input::text AS input, output::text AS output, error::text AS error, last_seq,
       created_at, updated_at, closed_at
FROM executions WHERE execution_id = :execution_id
""")

# Which of these executions exist, and which definition each runs: a batch start
# answers repeated ids from it (each looked up by its own key).
EXISTING_EXECUTIONS = S("""
SELECT execution_id, workflow, version, definition_hash, input FROM executions
WHERE execution_id = ANY(:execution_ids::text[])
""")

# ``:workflows``: LIKE patterns of the workflows a narrowed token may see; NULL: all.
LIST_EXECUTIONS = S("""
SELECT execution_id, position, workflow, version, definition_hash, status, parent,
       created_at, closed_at
FROM executions
WHERE (:status::text IS NULL OR status = :status)
  AND (:workflow::text IS NULL OR workflow = :workflow)
  AND (:workflows::text[] IS NULL OR workflow LIKE ANY(:workflows))
  AND (:before::bigint IS NULL OR position < :before)
ORDER BY position DESC
LIMIT :limit
""")

COUNT_RUNNING = S("SELECT count(*) FROM executions WHERE status = 'running'")

CLOSED_CHANNEL = "orbit_closed"
"""The channel on which appends announce the executions that ended, space-separated."""
