"""What the timer service's gauges read, across ``executions``, ``timers`` and
``outbox`` (:mod:`orbit_services.store.event_store` runs them)."""

from __future__ import annotations

from orbit_services.store.statements import Statement

S = Statement.named

# The gauges the timer service refreshes (orbit_services.timer.gauges): their cost
# follows what is active or waiting, not what ever ran (a partial index for the
# active executions; the outbox is small unless a relay is failing).
ACTIVE_EXECUTIONS_BY_WORKFLOW = S("""
SELECT workflow, count(*) AS active FROM executions
WHERE status IN ('created', 'running') GROUP BY workflow
""")
BACKLOG = S("""
SELECT (SELECT count(*) FROM timers WHERE due_at <= :now) AS timers_due,
       (SELECT count(*) FROM outbox) AS outbox_depth,
       (SELECT extract(epoch FROM now() - created_at) FROM outbox ORDER BY id LIMIT 1)
           AS outbox_oldest_s
""")
