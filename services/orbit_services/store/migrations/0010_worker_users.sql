-- The task patterns of each worker's RabbitMQ user (docs/security.md), as
-- `orbit broker user add --role worker --tasks ...` gave them. RabbitMQ holds
-- them as the user's read permission, which only its administrator can read;
-- the dispatcher reads them here, to refuse at registration a contract the
-- user could not consume (TASK_NOT_PERMITTED) instead of letting RabbitMQ
-- close the worker's channel when it consumes. A user with no row (made by
-- hand, or before this table) is not checked.
CREATE TABLE worker_users (
    name        text        PRIMARY KEY,
    tasks       text[]      NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
