-- The dispatchers alive, each beating every second. Worker sessions are only
-- expired while a dispatcher has been up for longer than the session timeout:
-- heartbeats reach Postgres through a dispatcher, so when none is up, or one
-- has only just come back, silence says nothing about the workers.
CREATE TABLE dispatchers (
    dispatcher_id text        PRIMARY KEY,
    up_since      timestamptz NOT NULL,
    seen_at       timestamptz NOT NULL
);
