"""Every Prometheus metric of Orbit, in one place (docs/operations.md, "Metrics").

Names follow Prometheus conventions (``orbit_..._total`` counters,
``_seconds`` histograms) and labels stay bounded: a workflow name, a task
name, a status, a timer kind, a queue kind or a service name, never an
execution id, a token or a worker id.

Counters of what executions and steps did are counted by the decider from
the events it commits, after the append succeeded: a batch that loses a
race and is decided again is counted once, and a batch that fails is not.

Every service registers in the process's default registry; ``orbit dev``
runs all of them in one process, so one scrape shows everything.
:func:`serve` starts the small HTTP server of the services other than the
gateway (which answers ``/metrics`` from its FastAPI app).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
)

from orbit_sdk import amqp

log = logging.getLogger("orbit.metrics")

_STEP = ("workflow", "task")
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 10_000)

# -- executions and steps (decider, from committed events) ---------------------

EXECUTIONS_STARTED = Counter(
    "orbit_executions_started_total", "Executions that started running.", ["workflow"]
)
EXECUTIONS_FINISHED = Counter(
    "orbit_executions_finished_total",
    "Executions that ended, by final status (completed, failed, cancelled, timed_out).",
    ["workflow", "status"],
)
STEPS_SCHEDULED = Counter("orbit_steps_scheduled_total", "Task steps scheduled.", _STEP)
STEPS_DISPATCHED = Counter(
    "orbit_steps_dispatched_total",
    "Attempts of task steps dispatched (first attempts, retries and redeliveries).",
    _STEP,
)
STEPS_SUCCEEDED = Counter("orbit_steps_succeeded_total", "Task steps that succeeded.", _STEP)
STEPS_FAILED = Counter(
    "orbit_steps_failed_total", "Task steps that failed for good (no attempt left).", _STEP
)
STEP_ATTEMPTS_FAILED = Counter(
    "orbit_step_attempts_failed_total",
    "Attempts of task steps that failed (retried or not).",
    _STEP,
)
STEPS_RETRIED = Counter(
    "orbit_steps_retried_total", "Retries scheduled after a failed attempt.", _STEP
)
STEPS_REDELIVERED = Counter(
    "orbit_steps_redelivered_total",
    "Attempts dispatched again after their delivery was lost (same idempotency key).",
    _STEP,
)
STEP_DURATION = Histogram(
    "orbit_step_duration_seconds",
    "From an attempt's dispatch to its result, as the decider committed them.",
    ["task", "outcome"],
    buckets=_DURATION_BUCKETS,
)

STEP_SCHEDULE_TO_START = Histogram(
    "orbit_step_schedule_to_start_seconds",
    "From an attempt's dispatch (the decider's clock) to its worker starting it (the"
    " worker's clock, so hosts' clock skew is in it): how long tasks wait for a worker.",
    ["task"],
    buckets=_DURATION_BUCKETS,
)

# -- the decider's batches -----------------------------------------------------

DECIDER_BATCH_INPUTS = Histogram(
    "orbit_decider_batch_inputs", "Inputs in each committed batch.", buckets=_BATCH_BUCKETS
)
DECIDER_DECIDE_SECONDS = Histogram(
    "orbit_decider_decide_seconds",
    "Loading and deciding one batch (before its commit), per try.",
    buckets=_LATENCY_BUCKETS,
)
DECIDER_COMMIT_SECONDS = Histogram(
    "orbit_decider_commit_seconds",
    "Appending one batch in its transaction (events, timers, outbox), per try.",
    buckets=_LATENCY_BUCKETS,
)
DECIDER_CONFLICTS = Counter(
    "orbit_decider_conflicts_total", "Batches decided again because another writer won."
)
DECIDER_PARTITIONS = Gauge(
    "orbit_decider_partitions", "Partitions of the decider queue this decider consumes now."
)
DECIDER_HANDOVERS = Counter(
    "orbit_decider_handovers_total",
    "Partitions this decider took or gave up (joins, stops, deaths of other deciders).",
    ["direction"],
)

# -- outbox --------------------------------------------------------------------

OUTBOX_PUBLISHED = Counter(
    "orbit_outbox_published_total",
    "Outbox messages published right after their commit.",
    ["service"],
)
OUTBOX_PUBLISH_FAILURES = Counter(
    "orbit_outbox_publish_failures_total",
    "Outbox messages whose publish after commit failed (left for the sweep).",
    ["service"],
)
OUTBOX_SWEPT = Counter(
    "orbit_outbox_swept_total",
    "Outbox messages left behind by their writer and published by the sweep.",
    ["service"],
)
OUTBOX_RELAY_LAG = Histogram(
    "orbit_outbox_relay_lag_seconds",
    "From a commit to the broker's confirm of the messages it wrote, per batch.",
    ["service"],
    buckets=_LATENCY_BUCKETS,
)
GATEWAY_WAITS = Gauge(
    "orbit_gateway_waits",
    "Requests waiting for an execution to end (?wait=) on this gateway now.",
)
OUTBOX_DEPTH = Gauge(
    "orbit_outbox_depth", "Outbox rows not yet published (the timer service counts them)."
)
OUTBOX_OLDEST = Gauge(
    "orbit_outbox_oldest_seconds", "Age of the oldest unpublished outbox row; 0 when none."
)
OUTBOX_SWEEP_LAG = Histogram(
    "orbit_outbox_sweep_lag_seconds",
    "Age of each outbox row the sweep published (commit to publish).",
    ["service"],
    buckets=(1, 2.5, 5, 7.5, 10, 15, 30, 60, 120, 300, 900, 3600),
)

# -- timers --------------------------------------------------------------------

TIMERS_FIRED = Counter(
    "orbit_timers_fired_total",
    "Timers fired, by kind (retry, timer, timeout, schedule, heartbeat, workflow).",
    ["kind"],
)
TIMERS_DUE = Gauge(
    "orbit_timers_due",
    "Timers past their due time and not fired yet (the timer service counts them).",
)
TIMER_LATENESS = Histogram(
    "orbit_timer_lateness_seconds",
    "How long after its due time a timer fired.",
    ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)

EXECUTIONS_ACTIVE = Gauge(
    "orbit_executions_active",
    "Executions created or running, by workflow (the timer service counts them).",
    ["workflow"],
)

# -- worker sessions -----------------------------------------------------------

SESSIONS_OPENED = Counter("orbit_worker_sessions_opened_total", "Worker sessions registered.")
SESSIONS_CLOSED = Counter(
    "orbit_worker_sessions_closed_total", "Worker sessions closed by their worker."
)
SESSIONS_EXPIRED = Counter(
    "orbit_worker_sessions_expired_total",
    "Worker sessions closed because the worker was not heard from in time.",
)
SESSIONS_ONLINE = Gauge(
    "orbit_worker_sessions_online",
    "Open worker sessions, as the dispatcher last counted them in Postgres.",
)

# -- messaging -----------------------------------------------------------------

MESSAGES_PARKED = Counter(
    "orbit_messages_parked_total",
    "Messages dead-lettered by a consumer, by the queue they came from.",
    ["queue"],
)
MESSAGES_REFUSED = Counter(
    "orbit_messages_refused_total",
    "Messages a consumer dropped for their sender (its AMQP user_id), by consumer, message"
    " type and reason: unknown_sender (no Orbit user of this namespace), wrong_role (a role"
    " that may not send it), reserved_task (a built-in task claimed by a user that is not"
    " the HTTP adapter's).",
    ["consumer", "message_type", "reason"],
)
PARKED_REPORTS = Counter(
    "orbit_parked_reports_total",
    "Parked messages the dispatcher read from NS.dead-letter.reports, by the parked"
    " message's type and what came of it: reported (its execution was told), ignored"
    " (no execution waits on it), failed.",
    ["message_type", "outcome"],
)
AMQP_CONNECTION_LOSSES = Counter(
    "orbit_amqp_connection_losses_total", "Connections to RabbitMQ lost (not closed by us)."
)
AMQP_RECONNECTS = Counter(
    "orbit_amqp_reconnects_total", "Connections to RabbitMQ restored after a loss."
)
AMQP_PUBLISHED = Counter(
    "orbit_amqp_messages_published_total",
    "Messages this process published to RabbitMQ (each confirmed by the broker).",
)
# Every AMQP connection and publisher of a service process counts here (a worker's
# in `orbit dev` too): the SDK's, which knows nothing of Prometheus, reports to them.
amqp.COUNTERS.published.append(AMQP_PUBLISHED.inc)
amqp.COUNTERS.lost.append(AMQP_CONNECTION_LOSSES.inc)
amqp.COUNTERS.reconnected.append(AMQP_RECONNECTS.inc)

POSTGRES_STATEMENTS = Counter(
    "orbit_postgres_statements_total",
    "Statements this process sent to Postgres through its pool (BEGIN and COMMIT included).",
)
POSTGRES_CONNECTION_LOSSES = Counter(
    "orbit_postgres_connection_losses_total",
    "Pooled connections to Postgres that ended without the service closing them.",
)
SPANS_DROPPED = Counter(
    "orbit_trace_spans_dropped_total",
    "Spans dropped because the exporter's queue was full (the collector is slow or down).",
)
SPANS_RECORDED = Counter("orbit_trace_spans_recorded_total", "Spans handed to the exporter.")

POSTGRES_RECONNECTS = Counter(
    "orbit_postgres_reconnects_total", "Connections to Postgres opened again after a loss."
)


def exposition() -> tuple[bytes, str]:
    """The default registry in the text format, and its content type."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


class MetricsEndpoint:
    """``/metrics`` of a service other than the gateway, on ``ORBIT_METRICS_PORT``.

    prometheus_client's HTTP server, in a thread. Services of one process
    (``orbit dev``, or ``orbit service decider dispatcher``) share one server
    on the port, started by the first and stopped with the last. Without a
    port, nothing is served: services on one host would collide on a default.
    """

    _servers: ClassVar[dict[tuple[str, int], list[Any]]] = {}
    """(host, port) → [server, thread, users], for this process."""

    def __init__(self, port: int | None, host: str = "127.0.0.1") -> None:
        self.port = port
        self.host = host
        self._serving = False

    def start(self) -> None:
        """Serve (or join the server already on the port).

        Raises:
            OSError: The port cannot be bound.
        """
        if self.port is None or self._serving:
            return
        key = (self.host, self.port)
        entry = self._servers.get(key)
        if entry is None:
            server, thread = start_http_server(self.port, addr=self.host)
            entry = self._servers[key] = [server, thread, 0]
            log.info(
                "metrics at http://%s:%d/metrics",
                self.host,
                self.port,
                extra={"action": "metrics.serving", "port": self.port},
            )
        entry[2] += 1
        self._serving = True

    async def stop(self) -> None:
        """Leave the server; the last one out shuts it down."""
        if not self._serving or self.port is None:
            return
        self._serving = False
        key = (self.host, self.port)
        entry = self._servers[key]
        entry[2] -= 1
        if entry[2] == 0:
            del self._servers[key]
            server = entry[0]
            await asyncio.to_thread(server.shutdown)
            server.server_close()
