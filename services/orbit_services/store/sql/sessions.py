"""The statements of worker sessions (``worker_sessions``, ``dispatchers``;
:mod:`orbit_services.store.sessions` runs them)."""

from __future__ import annotations

from orbit_services.store.statements import Statement

S = Statement.named

INSERT_SESSION = S("""
INSERT INTO worker_sessions (session_id, worker_id, runtime, sdk, contracts)
VALUES (:session_id, :worker_id, :runtime, :sdk, :contracts::jsonb)
""")

# A task's heartbeat_age_ms becomes its heartbeat_at on Postgres's clock (the one every
# time is compared on: runtime.clock); a heartbeat_at sent alone is kept as it is.
TOUCH_SESSION = S("""
UPDATE worker_sessions SET last_seen = now(), inflight = (
  SELECT coalesce(jsonb_agg(
    CASE WHEN jsonb_typeof(t->'heartbeat_age_ms') = 'number'
      THEN (t - 'heartbeat_age_ms') || jsonb_build_object('heartbeat_at',
        (extract(epoch FROM clock_timestamp()) * 1000)::bigint - (t->>'heartbeat_age_ms')::bigint)
      ELSE t - 'heartbeat_age_ms'
    END ORDER BY position), '[]'::jsonb)
  FROM jsonb_array_elements(:inflight::jsonb) WITH ORDINALITY AS e(t, position))
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

# When the task of each of these deliveries last heartbeated, per the open sessions
# holding it (its worker's report, else the session's last heartbeat): one round
# trip for a decider batch. A delivery nobody holds has no row.
DELIVERY_HEARTBEATS = S("""
SELECT t->>'token' AS token,
       max(coalesce((t->>'heartbeat_at')::bigint,
                    (extract(epoch FROM s.last_seen) * 1000)::bigint)) AS heartbeat_at
FROM worker_sessions AS s, jsonb_array_elements(s.inflight) AS t
WHERE s.closed_at IS NULL AND t->>'token' = ANY(:tokens::text[])
GROUP BY t->>'token'
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
