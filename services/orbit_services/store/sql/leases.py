"""The statements of ``deciders`` and ``decider_partitions``
(:mod:`orbit_services.store.leases` runs them)."""

from __future__ import annotations

from orbit_services.store.statements import Statement

S = Statement.named

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
