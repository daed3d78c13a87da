-- Keep the schema distributable by execution_id (docs/scaling.md, "Postgres past
-- one node"): on Citus a unique key must include the distribution column.
--
-- The outbox says whose commit wrote each row, and its key starts with it. The
-- relay still deletes published rows by id, through an index of their own.
ALTER TABLE outbox ADD COLUMN execution_id text NOT NULL DEFAULT '';
ALTER TABLE outbox DROP CONSTRAINT outbox_pkey;
ALTER TABLE outbox ADD PRIMARY KEY (execution_id, id);
CREATE INDEX outbox_by_id ON outbox (id);

-- The listing order stays a sequence, but not a unique key of its own: the
-- sequence alone keeps it unique.
ALTER TABLE executions DROP CONSTRAINT executions_position_key;
CREATE INDEX executions_by_position ON executions (position);
