-- AMQP headers of an outbox message (the traceparent of a task assignment,
-- which the decider now publishes to the task queue itself).
ALTER TABLE outbox ADD COLUMN headers jsonb;
