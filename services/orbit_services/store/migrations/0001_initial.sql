-- Orbit's first schema: definitions, executions, their history, the outbox,
-- timers and worker sessions. Times the decider computes with are epoch
-- milliseconds (bigint), as in the events; times for people are timestamptz.

CREATE TABLE definitions (
    name          text        NOT NULL,
    version       text        NOT NULL,
    hash          text        NOT NULL UNIQUE,
    ir            jsonb       NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, version)
);

CREATE TABLE executions (
    execution_id    text        PRIMARY KEY,
    position        bigserial   NOT NULL UNIQUE,  -- listing order and cursor
    workflow        text        NOT NULL,
    version         text        NOT NULL,
    definition_hash text        NOT NULL REFERENCES definitions (hash),
    status          text        NOT NULL,
    parent          text,
    input           jsonb,
    output          jsonb,
    error           jsonb,
    last_seq        bigint      NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    closed_at       timestamptz
);
CREATE INDEX executions_by_status ON executions (status, position);
CREATE INDEX executions_by_workflow ON executions (workflow, position);

-- The event store. The primary key is the only concurrency control: an
-- append whose first seq someone else took fails with a unique violation.
CREATE TABLE history (
    execution_id text        NOT NULL,
    seq          bigint      NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    type         text        NOT NULL,
    data         jsonb       NOT NULL,
    PRIMARY KEY (execution_id, seq)
);

-- Messages written with the events that caused them; a relay publishes
-- them with confirms and deletes them.
CREATE TABLE outbox (
    id          bigserial   PRIMARY KEY,
    exchange    text        NOT NULL,
    routing_key text        NOT NULL,
    body        bytea       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Every timer an execution waits on, kept equal to its state's timers.
CREATE TABLE timers (
    execution_id text   NOT NULL,
    key          text   NOT NULL,
    due_at       bigint NOT NULL,
    PRIMARY KEY (execution_id, key)
);
CREATE INDEX timers_by_due ON timers (due_at);

CREATE TABLE worker_sessions (
    session_id    text        PRIMARY KEY,
    worker_id     text        NOT NULL,
    runtime       text        NOT NULL,
    sdk           text,
    contracts     jsonb       NOT NULL,
    inflight      jsonb       NOT NULL DEFAULT '[]',
    registered_at timestamptz NOT NULL DEFAULT now(),
    last_seen     timestamptz NOT NULL DEFAULT now(),
    closed_at     timestamptz
);
CREATE INDEX worker_sessions_by_worker ON worker_sessions (worker_id);
