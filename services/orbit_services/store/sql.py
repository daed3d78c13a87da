"""Every SQL statement Orbit runs, in one place, named for what it does.

Parameters are named (``:execution_id``, :mod:`.statements`). Batched writes
take arrays and ``unnest`` them, so that appending the events of many
executions is one statement, whatever the batch size.
"""

from __future__ import annotations

from orbit_services.store.statements import Statement

S = Statement.named

PING = S("SELECT 1")

# -- definitions -------------------------------------------------------------

INSERT_DEFINITION = S("""
INSERT INTO definitions (name, version, hash, ir, source)
VALUES (:name, :version, :hash, :ir::jsonb, :source)
ON CONFLICT DO NOTHING
""")

DEFINITION_BY_NAME_VERSION = S("""
SELECT name, version, hash, ir::text AS ir, registered_at FROM definitions
WHERE name = :name AND version = :version
""")

DEFINITION_BY_HASH = S("""
SELECT name, version, hash, ir::text AS ir, registered_at FROM definitions WHERE hash = :hash
""")

DEFINITION_VERSIONS = S("SELECT version FROM definitions WHERE name = :name")

LIST_DEFINITIONS = S(
    "SELECT name, version, hash, registered_at FROM definitions ORDER BY name, registered_at"
)

# Which contract version of each task the registered workflows call.
TASK_VERSIONS_IN_USE = S("""
SELECT DISTINCT t.key AS task, t.value->>'version' AS version
FROM definitions, jsonb_each(coalesce(ir->'tasks', '{}'::jsonb)) AS t
""")


# -- history and executions ------------------------------------------------

# Everything a batch of appends writes, in one statement and so one round trip
# (a statement is its own transaction): the events, the new and the changed
# executions rows, the timers set and cleared, the outbox rows published since
# the last append deleted and the new ones inserted (ids in the order of the
# messages), a notification of the nearest timer set, delivered at commit
# so that a sleeping timer service wakes, and one of the executions that ended,
# so that the gateways answer their ``?wait`` (ids joined by spaces, which no id
# holds, 32 to a notification: a payload must stay under 8,000 bytes). Parts
# with nothing to write get empty arrays. A seq someone else took, or an execution id that exists,
# fails the whole statement with a unique violation: nothing is written.
# (An execution may end in the batch that creates it: a child whose steps
# are all skipped; its outcome is in its new row then.)
APPEND = S("""
WITH
new_events AS (
    INSERT INTO history (execution_id, seq, type, data)
    SELECT * FROM unnest(
        :event_execution_ids::text[], :event_seqs::bigint[], :event_types::text[],
        :event_data::text[]::jsonb[])
),
new_executions AS (
    INSERT INTO executions
        (execution_id, workflow, version, definition_hash, status, parent, input, last_seq,
         output, error, closed_at)
    SELECT u.execution_id, u.workflow, u.version, u.definition_hash, u.status, u.parent,
           u.input, u.last_seq, u.output, u.error, CASE WHEN u.closed THEN now() END
    FROM unnest(
        :new_ids::text[], :new_workflows::text[], :new_versions::text[],
        :new_hashes::text[], :new_statuses::text[], :new_parents::text[],
        :new_inputs::text[]::jsonb[], :new_last_seqs::bigint[], :new_outputs::text[]::jsonb[],
        :new_errors::text[]::jsonb[], :new_closed::bool[])
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
    FROM unnest(
        :changed_ids::text[], :changed_statuses::text[], :changed_outputs::text[]::jsonb[],
        :changed_errors::text[]::jsonb[], :changed_last_seqs::bigint[], :changed_closed::bool[])
        AS u(execution_id, status, output, error, last_seq, closed)
    WHERE e.execution_id = u.execution_id
),
timers_set AS (
    INSERT INTO timers (execution_id, key, due_at)
    SELECT * FROM unnest(:set_timer_ids::text[], :set_timer_keys::text[], :set_timer_dues::bigint[])
    ON CONFLICT (execution_id, key) DO UPDATE SET due_at = excluded.due_at
),
timers_cleared AS (
    DELETE FROM timers AS t
    USING unnest(:cleared_timer_ids::text[], :cleared_timer_keys::text[]) AS d(execution_id, key)
    WHERE t.execution_id = d.execution_id AND t.key = d.key
),
snapshots_written AS (
    INSERT INTO snapshots (execution_id, seq, version, state)
    SELECT * FROM unnest(
        :snapshot_ids::text[], :snapshot_seqs::bigint[], :snapshot_versions::text[],
        :snapshot_states::text[]::jsonb[])
    ON CONFLICT (execution_id) DO UPDATE
        SET seq = excluded.seq, version = excluded.version, state = excluded.state,
            written_at = now()
),
published AS (
    DELETE FROM outbox WHERE id = ANY(:published_ids::bigint[])
),
outbox_rows AS (
    INSERT INTO outbox (execution_id, exchange, routing_key, body, headers)
    SELECT m.execution_id, m.exchange, m.routing_key, m.body, m.headers
    FROM unnest(
        :outbox_execution_ids::text[], :outbox_exchanges::text[], :outbox_routing_keys::text[],
        :outbox_bodies::bytea[], :outbox_headers::jsonb[])
         WITH ORDINALITY AS m (execution_id, exchange, routing_key, body, headers, position)
    ORDER BY m.position
    RETURNING id
),
nearest_timer AS (
    SELECT pg_notify('orbit_timers', :nearest_timer::text) WHERE :nearest_timer::text IS NOT NULL
),
closed_ids AS (
    SELECT u.execution_id
    FROM unnest(:new_ids::text[], :new_closed::bool[]) AS u(execution_id, closed)
    WHERE u.closed
    UNION ALL
    SELECT u.execution_id
    FROM unnest(:changed_ids::text[], :changed_closed::bool[]) AS u(execution_id, closed)
    WHERE u.closed
),
closed_notified AS (
    SELECT pg_notify('orbit_closed', string_agg(c.execution_id, ' '))
    FROM (SELECT execution_id, (row_number() OVER () - 1) / 32 AS chunk FROM closed_ids) AS c
    GROUP BY c.chunk
)
SELECT coalesce((SELECT array_agg(id ORDER BY id) FROM outbox_rows), '{}') AS outbox_ids,
       (SELECT count(*) FROM nearest_timer) AS notified,
       (SELECT count(*) FROM closed_notified) AS closed_notified
""")

READ_EVENTS = S("""
SELECT seq, recorded_at, type, data::text AS data FROM history
WHERE execution_id = :execution_id AND seq > :after_seq ORDER BY seq
""")

# For each execution, its snapshot if it has one of this version newer than the
# seq the reader holds, then the events after the snapshot (or after that seq):
# one round trip (snapshots.py). Each execution is read by its key in a LATERAL
# subquery that OFFSET 0 keeps from being flattened into a join: as a join, the
# generic plan of asyncpg's prepared statement hashed the ids and scanned the
# whole history (194 ms at 250,000 events; tests/integration/test_query_plans.py).
READ_FROM_SNAPSHOTS = S("""
WITH wanted AS (
    SELECT c.execution_id, s.seq AS snapshot_seq, s.state,
           greatest(c.after_seq, coalesce(s.seq, 0)) AS after_seq
    FROM unnest(:execution_ids::text[], :after_seqs::bigint[]) AS c(execution_id, after_seq)
    LEFT JOIN LATERAL (
        SELECT seq, state FROM snapshots
        WHERE execution_id = c.execution_id AND version = :version AND seq > c.after_seq
        OFFSET 0
    ) AS s ON true
)
SELECT w.execution_id, w.snapshot_seq AS seq, NULL::timestamptz AS recorded_at,
       NULL::text AS type, w.state::text AS data, true AS snapshot
FROM wanted AS w WHERE w.snapshot_seq IS NOT NULL
UNION ALL
SELECT w.execution_id, h.seq, h.recorded_at, h.type, h.data::text, false
FROM wanted AS w CROSS JOIN LATERAL (
    SELECT seq, recorded_at, type, data FROM history
    WHERE execution_id = w.execution_id AND seq > w.after_seq
    OFFSET 0
) AS h
ORDER BY execution_id, snapshot DESC, seq
""")

SNAPSHOT_OF = S("SELECT seq, version FROM snapshots WHERE execution_id = :execution_id")

# The new events of many executions at once: one round trip for a decider batch,
# each execution's read by its key (LATERAL and OFFSET 0: see READ_FROM_SNAPSHOTS).
READ_EVENTS_MANY = S("""
SELECT c.execution_id, h.seq, h.recorded_at, h.type, h.data::text AS data
FROM unnest(:execution_ids::text[], :after_seqs::bigint[]) AS c(execution_id, after_seq)
CROSS JOIN LATERAL (
    SELECT seq, recorded_at, type, data FROM history
    WHERE execution_id = c.execution_id AND seq > c.after_seq
    OFFSET 0
) AS h
ORDER BY c.execution_id, h.seq
""")

EXECUTION_BY_ID = S("""
SELECT execution_id, position, workflow, version, definition_hash, status, parent,
       input::text AS input, output::text AS output, error::text AS error, last_seq,
       created_at, updated_at, closed_at
FROM executions WHERE execution_id = :execution_id
""")

# Which of these executions exist, and which definition each runs: a batch start
# answers repeated ids from it (each looked up by its own key).
EXISTING_EXECUTIONS = S("""
SELECT execution_id, definition_hash FROM executions
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

# -- timers ------------------------------------------------------------------

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

CLOSED_CHANNEL = "orbit_closed"
"""The channel on which appends announce the executions that ended, space-separated."""


# -- outbox ------------------------------------------------------------------

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

# -- worker sessions ---------------------------------------------------------

INSERT_SESSION = S("""
INSERT INTO worker_sessions (session_id, worker_id, runtime, sdk, contracts)
VALUES (:session_id, :worker_id, :runtime, :sdk, :contracts::jsonb)
""")

TOUCH_SESSION = S("""
UPDATE worker_sessions SET last_seen = now(), inflight = :inflight::jsonb
WHERE session_id = :session_id AND closed_at IS NULL
RETURNING session_id
""")

# RETURNING sees the updated row, so the tasks held before closing come from
# a locked read of the row as it was.
CLOSE_SESSION = S("""
UPDATE worker_sessions AS w SET closed_at = now(), inflight = '[]'
FROM (SELECT session_id, inflight FROM worker_sessions
      WHERE session_id = :session_id AND closed_at IS NULL FOR UPDATE) AS before
WHERE w.session_id = before.session_id
RETURNING before.inflight::text AS inflight
""")

SESSION_INFLIGHT = S("""
SELECT inflight::text AS inflight FROM worker_sessions
WHERE session_id = :session_id AND closed_at IS NULL
""")

# When the task of a delivery last heartbeated, per the open session holding it
# (its worker's report, else the session's last heartbeat); no row: nobody holds it.
DELIVERY_HEARTBEAT = S("""
SELECT max(coalesce((t->>'heartbeat_at')::bigint,
                    (extract(epoch FROM s.last_seen) * 1000)::bigint)) AS heartbeat_at
FROM worker_sessions AS s, jsonb_array_elements(s.inflight) AS t
WHERE s.closed_at IS NULL AND t->>'token' = :token
""")

# Sessions silent for longer than the session timeout are lost, but only while
# some dispatcher (seen within its silence) has been up for longer than that
# timeout: heartbeats reach Postgres through a dispatcher, so a dispatcher
# outage must not expire every session. The row lock of the UPDATE means two
# liveness replicas never expire one session twice.
EXPIRE_SESSIONS = S("""
UPDATE worker_sessions SET closed_at = now()
WHERE closed_at IS NULL AND last_seen < now() - make_interval(secs => :timeout_seconds)
  AND EXISTS (
      SELECT 1 FROM dispatchers
      WHERE seen_at > now() - make_interval(secs => :silence_seconds)
        AND up_since < now() - make_interval(secs => :timeout_seconds))
RETURNING session_id, worker_id, inflight::text AS inflight
""")

# A dispatcher's beat. Its up_since restarts when it was not seen for its
# silence (it was down, or cut off from Postgres); rows gone quiet for an hour go.
DISPATCHER_BEAT = S("""
WITH gone AS (DELETE FROM dispatchers WHERE seen_at < now() - interval '1 hour')
INSERT INTO dispatchers AS d (dispatcher_id, up_since, seen_at)
VALUES (:dispatcher_id, now(), now())
ON CONFLICT (dispatcher_id) DO UPDATE SET
    up_since = CASE WHEN d.seen_at < now() - make_interval(secs => :silence_seconds)
                    THEN now() ELSE d.up_since END,
    seen_at = now()
""")

# The tokens among :tokens that an open session's last heartbeat names: a lost
# session's task that another worker holds now (RabbitMQ redelivered it there)
# is that worker's, not lost.
HELD_TOKENS = S("""
SELECT DISTINCT t->>'token' AS token
FROM worker_sessions AS s, jsonb_array_elements(s.inflight) AS t
WHERE s.closed_at IS NULL AND t->>'token' = ANY(:tokens::text[])
  AND s.session_id IS DISTINCT FROM :session_id::text
""")

# The worker of the newest session whose heartbeat named a delivery (open or
# expired; an unregistered session's list is emptied, it gave its tasks back).
LAST_HOLDER = S("""
SELECT s.worker_id
FROM worker_sessions AS s, jsonb_array_elements(s.inflight) AS t
WHERE t->>'token' = :token
ORDER BY s.last_seen DESC
LIMIT 1
""")

COUNT_OPEN_SESSIONS = S("SELECT count(*) FROM worker_sessions WHERE closed_at IS NULL")

LIST_SESSIONS = S("""
SELECT session_id, worker_id, runtime, sdk, contracts::text AS contracts,
       inflight::text AS inflight, registered_at, last_seen, closed_at
FROM worker_sessions
WHERE closed_at IS NULL OR closed_at > now() - interval '1 hour'
ORDER BY worker_id, registered_at
""")

# -- migrations --------------------------------------------------------------

# An arbitrary constant: the advisory lock every Orbit migrator takes.
MIGRATION_LOCK = 0x0B17_0001

DATABASE_EXISTS = S("SELECT 1 FROM pg_database WHERE datname = :name")
LOCK_MIGRATIONS = S("SELECT pg_advisory_lock(:lock)")
UNLOCK_MIGRATIONS = S("SELECT pg_advisory_unlock(:lock)")
CREATE_MIGRATIONS_TABLE = S(
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " number integer PRIMARY KEY, name text NOT NULL,"
    " applied_at timestamptz NOT NULL DEFAULT now())"
)
APPLIED_MIGRATIONS = S("SELECT number FROM schema_migrations")
RECORD_MIGRATION = S("INSERT INTO schema_migrations (number, name) VALUES (:number, :name)")

# -- API tokens (orbit_services.store.tokens) ----------------------------------

INSERT_TOKEN = S("""
INSERT INTO api_tokens (name, digest, scopes, workflows, expires_at)
VALUES (:name, :digest, :scopes, :workflows, :expires_at)
ON CONFLICT DO NOTHING
RETURNING name, scopes, workflows, created_at, expires_at, revoked_at, last_used_at
""")

LIST_TOKENS = S("""
SELECT name, scopes, workflows, created_at, expires_at, revoked_at, last_used_at
FROM api_tokens ORDER BY created_at, name
""")

REVOKE_TOKEN = S("""
UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now()) WHERE name = :name
RETURNING name, scopes, workflows, created_at, expires_at, revoked_at, last_used_at
""")

# The grant of a presented token: Postgres's clock decides expiry, so that every
# gateway replica agrees whatever its own clock says.
TOKEN_GRANT = S("""
SELECT name, scopes, workflows FROM api_tokens
WHERE digest = :digest AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
""")

TOUCH_TOKEN = S("UPDATE api_tokens SET last_used_at = now() WHERE name = :name")

COUNT_USABLE_TOKENS = S("""
SELECT count(*) FROM api_tokens
WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
""")

# -- decider partition leases (store/leases.py) ---------------------------------

# Every partition of the installation gets its row once, by the first decider
# (under a lock: deciders starting together must not both see an empty table);
# the count then says whether this decider agrees with the others on
# ORBIT_DECIDER_PARTITIONS.
LOCK_PARTITIONS = S("SELECT pg_advisory_xact_lock(hashtext('orbit.decider_partitions'))")

ENSURE_PARTITIONS = S("""
INSERT INTO decider_partitions (partition)
SELECT generate_series(0, :partitions - 1)
WHERE NOT EXISTS (SELECT 1 FROM decider_partitions)
""")

COUNT_PARTITIONS = S("SELECT count(*) FROM decider_partitions")

# A decider's beat; members silent for an hour are forgotten.
DECIDER_BEAT = S("""
WITH gone AS (DELETE FROM deciders WHERE seen_at < now() - interval '1 hour')
INSERT INTO deciders AS d (decider_id, host, pid, started_at, seen_at)
VALUES (:decider_id, :host, :pid, now(), now())
ON CONFLICT (decider_id) DO UPDATE SET seen_at = now()
""")

# The deciders heard from within the lease time, in the order that ranks them.
LIVE_DECIDERS = S("""
SELECT decider_id FROM deciders
WHERE seen_at > now() - make_interval(secs => :lease_seconds)
ORDER BY decider_id
""")

# What the decider still holds, renewed; a partition another took (our lease
# lapsed while we were cut off) is not among them.
RENEW_LEASES = S("""
UPDATE decider_partitions SET lease_until = now() + make_interval(secs => :lease_seconds)
WHERE owner = :decider_id AND lease_until > now()
RETURNING partition
""")

# Free partitions (never owned, given back, or whose lease lapsed), lowest first.
# SKIP LOCKED: two deciders claiming at once take different ones.
CLAIM_PARTITIONS = S("""
UPDATE decider_partitions AS p SET
    owner = :decider_id,
    lease_until = now() + make_interval(secs => :lease_seconds),
    taken_at = now(),
    handovers = p.handovers + 1
WHERE p.partition IN (
    SELECT partition FROM decider_partitions
    WHERE owner IS NULL OR lease_until <= now()
    ORDER BY partition LIMIT :count
    FOR UPDATE SKIP LOCKED)
RETURNING p.partition
""")

RELEASE_PARTITIONS = S("""
UPDATE decider_partitions SET owner = NULL, lease_until = NULL
WHERE owner = :decider_id AND partition = ANY(:partitions::integer[])
""")

# A decider that stops gives back everything it holds, and leaves.
LEAVE_DECIDERS = S("""
WITH released AS (
    UPDATE decider_partitions SET owner = NULL, lease_until = NULL WHERE owner = :decider_id)
DELETE FROM deciders WHERE decider_id = :decider_id
""")

# Every decider heard from in the last hour and every partition, for `orbit deciders`.
LIST_DECIDERS = S("""
SELECT decider_id, host, pid, started_at, seen_at,
       seen_at > now() - make_interval(secs => :lease_seconds) AS live
FROM deciders ORDER BY decider_id
""")

LIST_PARTITIONS = S("""
SELECT partition, owner, lease_until, taken_at, handovers,
       owner IS NOT NULL AND lease_until > now() AS leased
FROM decider_partitions ORDER BY partition
""")
