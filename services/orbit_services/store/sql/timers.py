"""The statements of ``timers``, and their channel (:mod:`orbit_services.store.timers`;
the append sets and clears them: :mod:`.history`).
"""

from __future__ import annotations

from orbit_services.store.statements import Statement

S = Statement.named

TAKE_DUE_TIMERS = S("""
DELETE FROM timers AS t USING (
    SELECT execution_id, key FROM timers WHERE due_at <= :now ORDER BY due_at LIMIT :limit
    FOR UPDATE SKIP LOCKED) AS due
WHERE t.execution_id = due.execution_id AND t.key = due.key
RETURNING t.execution_id, t.key, t.due_at
""")

NEXT_TIMER_DUE = S("SELECT min(due_at) FROM timers")

TIMERS_OF = S("SELECT key, due_at FROM timers WHERE execution_id = :execution_id")

TIMERS_CHANNEL = "orbit_timers"
"""The LISTEN/NOTIFY channel on which appends announce the nearest timer they wrote."""
