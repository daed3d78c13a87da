"""What the console reads beyond the API's queries (``executions``, ``definitions``;
:mod:`orbit_services.store.console` runs them)."""

from __future__ import annotations

from orbit_services.store.statements import Statement

S = Statement.named

_FILTERS = """
      (:workflow::text IS NULL OR workflow = :workflow)
  AND (:workflows::text[] IS NULL OR workflow LIKE ANY(:workflows))
  AND (:since::timestamptz IS NULL OR created_at >= :since)
  AND (:until::timestamptz IS NULL OR created_at < :until)
  AND (:prefix::text IS NULL OR starts_with(execution_id, :prefix))
"""

LIST_PAGE = S(f"""
SELECT execution_id, position, workflow, version, definition_hash, status, parent,
       created_at, closed_at
FROM executions
WHERE {_FILTERS}
  AND (:status::text IS NULL OR status = :status)
  AND (:before::bigint IS NULL OR position < :before)
ORDER BY position DESC
LIMIT :limit
""")

COUNT_BY_STATUS = S(f"""
SELECT status, count(*) AS n FROM executions WHERE {_FILTERS} GROUP BY status
""")

EXECUTIONS_BY_ID = S("""
SELECT execution_id, position, workflow, version, definition_hash, status, parent,
       created_at, closed_at
FROM executions WHERE execution_id = ANY(:ids::text[]) ORDER BY position
""")

DEFINITION_SOURCE = S("SELECT source FROM definitions WHERE name = :name AND version = :version")
