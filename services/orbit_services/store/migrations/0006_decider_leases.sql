-- The deciders share the partitions of the decider queue through leases
-- (docs/scaling.md). A decider beats in `deciders` every second; it holds a
-- partition while its row here names it and the lease has not lapsed, renews
-- what it holds with every beat, and gives back what the balance asks it to.
-- Both tables are tiny and hold nothing of any execution: on Citus they stay
-- on the coordinator.
CREATE TABLE deciders (
    decider_id text        PRIMARY KEY,
    host       text        NOT NULL,
    pid        integer     NOT NULL,
    started_at timestamptz NOT NULL,
    seen_at    timestamptz NOT NULL
);

-- One row per partition, made by the first decider to start; the count is the
-- installation's ORBIT_DECIDER_PARTITIONS, and a decider with another refuses to run.
CREATE TABLE decider_partitions (
    partition   integer     PRIMARY KEY,
    owner       text,
    lease_until timestamptz,
    taken_at    timestamptz,
    handovers   bigint      NOT NULL DEFAULT 0
);
