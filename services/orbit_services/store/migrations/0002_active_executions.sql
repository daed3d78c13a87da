-- The active executions by workflow (the orbit_executions_active gauge) from an
-- index-only scan: its cost follows how many run, not how many ever ran.
CREATE INDEX executions_active_by_workflow ON executions (workflow)
    WHERE status IN ('created', 'running');
