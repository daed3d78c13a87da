"""Every SQL statement Orbit runs, in one place, named for what it does.

Batched writes take arrays and ``unnest`` them, so that appending the events
of many executions is one statement per table, whatever the batch size.
"""

from __future__ import annotations

# -- definitions -------------------------------------------------------------

INSERT_DEFINITION = """
INSERT INTO definitions (name, version, hash, ir) VALUES ($1, $2, $3, $4::jsonb)
ON CONFLICT DO NOTHING
"""

DEFINITION_BY_NAME_VERSION = """
SELECT name, version, hash, ir::text AS ir, registered_at FROM definitions
WHERE name = $1 AND version = $2
"""

DEFINITION_BY_HASH = (
    "SELECT name, version, hash, ir::text AS ir, registered_at FROM definitions WHERE hash = $1"
)

DEFINITION_VERSIONS = "SELECT version FROM definitions WHERE name = $1"

LIST_DEFINITIONS = (
    "SELECT name, version, hash, registered_at FROM definitions ORDER BY name, registered_at"
)

# Which contract version of each task the registered workflows call.
TASK_VERSIONS_IN_USE = """
SELECT DISTINCT t.key AS task, t.value->>'version' AS version
FROM definitions, jsonb_each(coalesce(ir->'tasks', '{}'::jsonb)) AS t
"""


# -- history and executions ------------------------------------------------

# Everything a batch of appends writes, in one statement and so one round trip
# (a statement is its own transaction): the events, the new and the changed
# executions rows, the timers set and cleared, the outbox rows published since
# the last append deleted and the new ones inserted (ids in the order of the
# messages), and a notification of the nearest timer set, delivered at commit
# so that a sleeping timer service wakes. Parts with nothing to write get
# empty arrays. A seq someone else took, or an execution id that exists,
# fails the whole statement with a unique violation: nothing is written.
# (An execution may end in the batch that creates it: a child whose steps
# are all skipped; its outcome is in its new row then.)
APPEND = """
WITH
new_events AS (
    INSERT INTO history (execution_id, seq, type, data)
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[]::jsonb[])
),
new_executions AS (
    INSERT INTO executions
        (execution_id, workflow, version, definition_hash, status, parent, input, last_seq,
         output, error, closed_at)
    SELECT u.execution_id, u.workflow, u.version, u.definition_hash, u.status, u.parent,
           u.input, u.last_seq, u.output, u.error, CASE WHEN u.closed THEN now() END
    FROM unnest(
        $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[],
        $11::text[]::jsonb[], $12::bigint[], $13::text[]::jsonb[], $14::text[]::jsonb[],
        $15::bool[])
        AS u(execution_id, workflow, version, definition_hash, status, parent, input,
             last_seq, output, error, closed)
),
changed_executions AS (
    UPDATE executions AS e SET
        status = u.status,
        output = u.output,
        error = u.error,
        last_seq = u.last_seq,
        updated_at = now(),
        closed_at = CASE WHEN u.closed THEN coalesce(e.closed_at, now()) ELSE NULL END
    FROM unnest($16::text[], $17::text[], $18::text[]::jsonb[], $19::text[]::jsonb[],
                $20::bigint[], $21::bool[])
        AS u(execution_id, status, output, error, last_seq, closed)
    WHERE e.execution_id = u.execution_id
),
timers_set AS (
    INSERT INTO timers (execution_id, key, due_at)
    SELECT * FROM unnest($22::text[], $23::text[], $24::bigint[])
    ON CONFLICT (execution_id, key) DO UPDATE SET due_at = excluded.due_at
),
timers_cleared AS (
    DELETE FROM timers AS t USING unnest($25::text[], $26::text[]) AS d(execution_id, key)
    WHERE t.execution_id = d.execution_id AND t.key = d.key
),
published AS (
    DELETE FROM outbox WHERE id = ANY($27::bigint[])
),
outbox_rows AS (
    INSERT INTO outbox (exchange, routing_key, body, headers)
    SELECT m.exchange, m.routing_key, m.body, m.headers
    FROM unnest($28::text[], $29::text[], $30::bytea[], $31::jsonb[])
         WITH ORDINALITY AS m (exchange, routing_key, body, headers, position)
    ORDER BY m.position
    RETURNING id
),
nearest_timer AS (
    SELECT pg_notify('orbit_timers', $32::text) WHERE $32::text IS NOT NULL
)
SELECT coalesce((SELECT array_agg(id ORDER BY id) FROM outbox_rows), '{}') AS outbox_ids,
       (SELECT count(*) FROM nearest_timer) AS notified
"""

READ_EVENTS = """
SELECT seq, recorded_at, type, data::text AS data FROM history
WHERE execution_id = $1 AND seq > $2 ORDER BY seq
"""

# The new events of many executions at once: one round trip for a decider batch.
READ_EVENTS_MANY = """
SELECT h.execution_id, h.seq, h.data::text AS data
FROM unnest($1::text[], $2::bigint[]) AS c(execution_id, after_seq)
JOIN history AS h ON h.execution_id = c.execution_id AND h.seq > c.after_seq
ORDER BY h.execution_id, h.seq
"""

EXECUTION_BY_ID = """
SELECT execution_id, position, workflow, version, definition_hash, status, parent,
       input::text AS input, output::text AS output, error::text AS error, last_seq,
       created_at, updated_at, closed_at
FROM executions WHERE execution_id = $1
"""

LIST_EXECUTIONS = """
SELECT execution_id, position, workflow, version, definition_hash, status, parent,
       created_at, closed_at
FROM executions
WHERE ($1::text IS NULL OR status = $1)
  AND ($2::text IS NULL OR workflow = $2)
  AND ($3::bigint IS NULL OR position < $3)
ORDER BY position DESC
LIMIT $4
"""

COUNT_RUNNING = "SELECT count(*) FROM executions WHERE status = 'running'"

# The gauges the timer service refreshes (orbit_services.timer.gauges): their cost
# follows what is active or waiting, not what ever ran (a partial index for the
# active executions; the outbox is small unless a relay is failing).
ACTIVE_EXECUTIONS_BY_WORKFLOW = """
SELECT workflow, count(*) AS active FROM executions
WHERE status IN ('created', 'running') GROUP BY workflow
"""
BACKLOG = """
SELECT (SELECT count(*) FROM timers WHERE due_at <= $1) AS timers_due,
       (SELECT count(*) FROM outbox) AS outbox_depth,
       (SELECT extract(epoch FROM now() - created_at) FROM outbox ORDER BY id LIMIT 1)
           AS outbox_oldest_s
"""

# -- timers ------------------------------------------------------------------

TAKE_DUE_TIMERS = """
DELETE FROM timers WHERE ctid IN (
    SELECT ctid FROM timers WHERE due_at <= $1 ORDER BY due_at LIMIT $2
    FOR UPDATE SKIP LOCKED)
RETURNING execution_id, key, due_at
"""

NEXT_TIMER_DUE = "SELECT min(due_at) FROM timers"

TIMERS_CHANNEL = "orbit_timers"
"""The LISTEN/NOTIFY channel on which appends announce the nearest timer they wrote."""


# -- outbox ------------------------------------------------------------------

DELETE_OUTBOX = "DELETE FROM outbox WHERE id = ANY($1::bigint[])"

# Rows older than the grace period belong to a writer that did not publish
# them (it crashed, or lost the broker): the relay takes them over.
TAKE_STALE_OUTBOX = """
SELECT id, exchange, routing_key, body, headers,
       extract(epoch FROM now() - created_at)::float8 AS age
FROM outbox
WHERE created_at < now() - make_interval(secs => $1)
ORDER BY id LIMIT $2
FOR UPDATE SKIP LOCKED
"""

# -- worker sessions ---------------------------------------------------------

INSERT_SESSION = """
INSERT INTO worker_sessions (session_id, worker_id, runtime, sdk, contracts)
VALUES ($1, $2, $3, $4, $5::jsonb)
"""

TOUCH_SESSION = """
UPDATE worker_sessions SET last_seen = now(), inflight = $2::jsonb
WHERE session_id = $1 AND closed_at IS NULL
RETURNING session_id
"""

# RETURNING sees the updated row, so the tasks held before closing come from
# a locked read of the row as it was.
CLOSE_SESSION = """
UPDATE worker_sessions AS w SET closed_at = now(), inflight = '[]'
FROM (SELECT session_id, inflight FROM worker_sessions
      WHERE session_id = $1 AND closed_at IS NULL FOR UPDATE) AS before
WHERE w.session_id = before.session_id
RETURNING before.inflight::text AS inflight
"""

SESSION_INFLIGHT = """
SELECT inflight::text AS inflight FROM worker_sessions
WHERE session_id = $1 AND closed_at IS NULL
"""

# When the task of a delivery last heartbeated, per the open session holding it
# (its worker's report, else the session's last heartbeat); no row: nobody holds it.
DELIVERY_HEARTBEAT = """
SELECT max(coalesce((t->>'heartbeat_at')::bigint,
                    (extract(epoch FROM s.last_seen) * 1000)::bigint)) AS heartbeat_at
FROM worker_sessions AS s, jsonb_array_elements(s.inflight) AS t
WHERE s.closed_at IS NULL AND t->>'token' = $1
"""

# Sessions silent for longer than the session timeout ($1 s) are lost, but only
# while some dispatcher (seen within $2 s) has been up for longer than that
# timeout: heartbeats reach Postgres through a dispatcher, so a dispatcher
# outage must not expire every session. The row lock of the UPDATE means two
# liveness replicas never expire one session twice.
EXPIRE_SESSIONS = """
UPDATE worker_sessions SET closed_at = now()
WHERE closed_at IS NULL AND last_seen < now() - make_interval(secs => $1)
  AND EXISTS (
      SELECT 1 FROM dispatchers
      WHERE seen_at > now() - make_interval(secs => $2)
        AND up_since < now() - make_interval(secs => $1))
RETURNING session_id, worker_id, inflight::text AS inflight
"""

# A dispatcher's beat. Its up_since restarts when it was not seen for $2 s
# (it was down, or cut off from Postgres); rows gone quiet for an hour go.
DISPATCHER_BEAT = """
WITH gone AS (DELETE FROM dispatchers WHERE seen_at < now() - interval '1 hour')
INSERT INTO dispatchers AS d (dispatcher_id, up_since, seen_at) VALUES ($1, now(), now())
ON CONFLICT (dispatcher_id) DO UPDATE SET
    up_since = CASE WHEN d.seen_at < now() - make_interval(secs => $2)
                    THEN now() ELSE d.up_since END,
    seen_at = now()
"""

COUNT_OPEN_SESSIONS = "SELECT count(*) FROM worker_sessions WHERE closed_at IS NULL"

LIST_SESSIONS = """
SELECT session_id, worker_id, runtime, sdk, contracts::text AS contracts,
       inflight::text AS inflight, registered_at, last_seen, closed_at
FROM worker_sessions
WHERE closed_at IS NULL OR closed_at > now() - interval '1 hour'
ORDER BY worker_id, registered_at
"""
