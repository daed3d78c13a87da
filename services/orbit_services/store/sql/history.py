"""The statements of ``history`` and ``snapshots``: the one append, which writes
every table an execution's turn changes, and the reads of executions' events
(:mod:`orbit_services.store.event_store` and :mod:`orbit_services.store.snapshots`).
"""

from __future__ import annotations

from orbit_services.store.statements import Statement

S = Statement.named

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
# one round trip, each execution read by its own key (snapshots.py).
#
# Each execution's rows are read by a LATERAL subquery that OFFSET 0 keeps from
# being flattened into a join: a join lets the plan asyncpg's prepared statement
# settles on (a generic plan, estimating ten ids and hundreds of events each)
# hash the ids and scan the whole history, 194 ms at 250,000 events where the
# index takes 0.2 ms. These read by (execution_id, seq) and nothing else
# (tests/integration/test_query_plans.py forces that generic plan).
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
