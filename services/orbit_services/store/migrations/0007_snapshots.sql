-- Snapshots of executions' states (docs/architecture.md, "Snapshots"): every
-- ORBIT_SNAPSHOT_EVERY events the decider writes the state after its append,
-- in the same statement as the append. A load reads the snapshot and only the
-- events after it. One row per execution, the latest; its key is the
-- execution id, so on Citus it lives with the execution's history.
--
-- A snapshot is a cache of the fold, never the truth: one whose version is not
-- the reader's (the models changed), or that does not decode, is ignored and
-- the history replayed from its start.
CREATE TABLE snapshots (
    execution_id text        PRIMARY KEY,
    seq          bigint      NOT NULL,
    version      text        NOT NULL,
    state        jsonb       NOT NULL,
    written_at   timestamptz NOT NULL DEFAULT now()
);
