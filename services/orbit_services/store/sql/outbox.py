"""The statements of ``outbox`` (:mod:`orbit_services.store.outbox`; the append writes
the rows and deletes the published ones: :mod:`.history`).
"""

from __future__ import annotations

from orbit_services.store.statements import Statement

S = Statement.named

DELETE_OUTBOX = S("DELETE FROM outbox WHERE id = ANY(:ids::bigint[])")

# Rows older than the grace period belong to a writer that did not publish
# them (it crashed, or lost the broker): the relay takes them over.
TAKE_STALE_OUTBOX = S("""
SELECT id, exchange, routing_key, body, headers,
       extract(epoch FROM now() - created_at)::float8 AS age
FROM outbox
WHERE created_at < now() - make_interval(secs => :grace_seconds)
ORDER BY id LIMIT :limit
FOR UPDATE SKIP LOCKED
""")
