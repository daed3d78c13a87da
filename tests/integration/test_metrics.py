"""Prometheus metrics scraped from running services after a known workload.

Every service in this process registers in prometheus_client's default
registry, which earlier tests of the same xdist worker have already moved:
the test reads deltas (after - before), never absolute values.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import asyncpg
import httpx
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from orbit_model.errors import OrbitError
from orbit_model.views import view_json
from orbit_sdk import TaskContext, TaskError, task
from orbit_services.store import EventStore
from orbit_services.store.pool import APPLICATION_NAME
from tests.e2e.stack import free_port, running_stack
from tests.integration.conftest import OrbitEnv
from tests.integration.eventually import eventually

WORKFLOW = """
orbit: 1
workflow: metered
version: 1.0.0
input: {type: object, properties: {fail_once: {type: boolean}}}
tasks:
  meter-first: {version: "1"}
  meter-flaky: {version: "1"}
steps:
  - id: first
    task: meter-first
  - id: second
    task: meter-flaky
    input: {fail_once: "${ input.fail_once }"}
    retry: {max_attempts: 3, initial_interval: 50ms}
"""

# Started and left waiting: the active-executions gauge counts it.
WAITING = """
orbit: 1
workflow: waiting-meter
version: 1.0.0
signals: {go: {}}
steps:
  - id: hold
    await: go
"""

RUNS = 5

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@task("meter-first", version="1")
async def meter_first(inp: Any, ctx: TaskContext) -> dict[str, Any]:
    return {"ok": True}


@task("meter-flaky", version="1")
async def meter_flaky(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    if inp.get("fail_once") and ctx.attempt == 1:
        raise TaskError("FLAKY", "fails the first time")
    return {"attempt": ctx.attempt}


async def scrape(url: str) -> tuple[str, Samples]:
    async with httpx.AsyncClient() as http:
        response = await http.get(url)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return response.text, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_a_known_workload_is_counted(orbit_env: OrbitEnv) -> None:
    metrics_port = free_port()
    losses = REGISTRY.get_sample_value("orbit_amqp_connection_losses_total")
    settings = orbit_env.settings_with(metrics_port=metrics_port, gauge_interval_ms=100)
    async with running_stack(settings, [meter_first, meter_flaky]) as stack:
        gateway = f"http://127.0.0.1:{stack.settings.http_port}/metrics"
        served = f"http://127.0.0.1:{metrics_port}/metrics"
        _, before = await scrape(gateway)
        await stack.client.deploy(WORKFLOW)
        await stack.client.deploy(WAITING)
        await stack.client.start("waiting-meter", None, execution_id="waiting-1")
        ids = [f"metered-{n}" for n in range(RUNS)]
        for n, execution_id in enumerate(ids):
            await stack.client.start("metered", {"fail_once": n == 0}, execution_id=execution_id)
        for execution_id in ids:
            result = view_json(await stack.client.wait(execution_id, timeout=20))
            assert result["status"] == "completed", result

        def settled(scraped: tuple[str, Samples]) -> bool:
            finished = "orbit_executions_finished_total"
            labels = {"workflow": "metered", "status": "completed"}
            done = value(scraped[1], finished, **labels) - value(before, finished, **labels)
            # The gauges are refreshed every 100 ms by the timer service.
            gauges = (
                value(scraped[1], "orbit_executions_active", workflow="metered") == 0
                and value(scraped[1], "orbit_executions_active", workflow="waiting-meter") == 1
                and value(scraped[1], "orbit_outbox_depth") == 0
                and value(scraped[1], "orbit_timers_due") == 0
            )
            return done == RUNS and gauges

        text, after = await eventually(lambda: scrape(gateway), settled, what="5 finished")
        _, elsewhere = await scrape(served)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    first = {"workflow": "metered", "task": "meter-first"}
    flaky = {"workflow": "metered", "task": "meter-flaky"}
    assert delta("orbit_executions_started_total", workflow="metered") == RUNS
    assert delta("orbit_executions_finished_total", workflow="metered", status="completed") == RUNS
    assert delta("orbit_executions_finished_total", workflow="metered", status="failed") == 0
    assert delta("orbit_steps_scheduled_total", **first) == RUNS
    assert delta("orbit_steps_scheduled_total", **flaky) == RUNS
    assert delta("orbit_steps_dispatched_total", **first) == RUNS
    assert delta("orbit_steps_dispatched_total", **flaky) == RUNS + 1
    assert delta("orbit_steps_succeeded_total", **first) == RUNS
    assert delta("orbit_steps_succeeded_total", **flaky) == RUNS
    assert delta("orbit_step_attempts_failed_total", **flaky) == 1
    assert delta("orbit_step_attempts_failed_total", **first) == 0
    assert delta("orbit_steps_retried_total", **flaky) == 1
    assert delta("orbit_steps_failed_total", **flaky) == 0
    assert delta("orbit_steps_redelivered_total", **flaky) == 0

    # Durations: one observation per attempt's result, by task and outcome.
    duration = "orbit_step_duration_seconds_count"
    assert delta(duration, task="meter-first", outcome="succeeded") == RUNS
    assert delta(duration, task="meter-flaky", outcome="succeeded") == RUNS
    assert delta(duration, task="meter-flaky", outcome="failed") == 1
    assert delta("orbit_step_duration_seconds_sum", task="meter-flaky", outcome="succeeded") > 0
    # Schedule-to-start: one observation per attempt a worker started, by task.
    waited = "orbit_step_schedule_to_start_seconds_count"
    assert delta(waited, task="meter-first") == RUNS
    assert delta(waited, task="meter-flaky") == RUNS + 1

    # The decider's batches, the outbox, the retry's timer, the worker's session.
    assert delta("orbit_decider_batch_inputs_count") > 0
    assert delta("orbit_decider_batch_inputs_sum") >= delta("orbit_decider_batch_inputs_count")
    assert delta("orbit_decider_decide_seconds_count") > 0
    assert delta("orbit_decider_commit_seconds_count") > 0
    assert delta("orbit_outbox_published_total", service="gateway") >= RUNS  # the wake-ups
    assert delta("orbit_outbox_published_total", service="decider") >= 2 * RUNS + 1
    assert delta("orbit_outbox_relay_lag_seconds_count", service="decider") > 0
    assert value(after, "orbit_outbox_oldest_seconds") == 0
    # What the benchmark counts cost with: every message and statement of the process.
    # (5 starts' wakes, 11 tasks and their 11 results at least, all in this process.)
    assert delta("orbit_amqp_messages_published_total") >= RUNS + 2 * (2 * RUNS + 1)
    assert delta("orbit_postgres_statements_total") >= RUNS  # an append per start at least
    assert delta("orbit_timers_fired_total", kind="retry") == 1
    assert delta("orbit_timer_lateness_seconds_count", kind="retry") == 1
    assert value(after, "orbit_worker_sessions_online") >= 1
    assert delta("orbit_messages_parked_total", queue="decider") == 0

    # The decider, dispatcher and timer share one server on ORBIT_METRICS_PORT,
    # with the same registry as the gateway's /metrics.
    for key in (
        ("orbit_executions_started_total", (("workflow", "metered"),)),
        ("orbit_steps_retried_total", tuple(sorted(flaky.items()))),
    ):
        assert elsewhere[key] == after[key]

    # Bounded labels: no execution id, token or worker id in any label value.
    for (_name, labels), _ in after.items():
        for _label, label_value in labels:
            assert "metered-" not in label_value
            assert "e2e" not in label_value
    assert "metered-" not in text

    # Closing the services' connections is not a loss.
    assert REGISTRY.get_sample_value("orbit_amqp_connection_losses_total") == losses

    # The last service stopped took the metrics server with it.
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", metrics_port)) != 0


async def test_a_lost_postgres_connection_is_counted_and_so_is_the_reconnect(
    orbit_env: OrbitEnv,
) -> None:
    def count(name: str) -> float:
        return REGISTRY.get_sample_value(name) or 0.0

    losses = count("orbit_postgres_connection_losses_total")
    reconnects = count("orbit_postgres_reconnects_total")
    # A connection is retired after 2 queries: the pool's own closes are not losses.
    url = orbit_env.settings.database_url
    recycling = await EventStore.connect(url, min_size=1, max_size=1, max_queries=2)
    for _ in range(5):
        await recycling.ping()
    await recycling.expire_connections()
    await recycling.ping()
    await recycling.close()
    await asyncio.sleep(0.05)  # termination listeners run soon after, not at once
    assert count("orbit_postgres_connection_losses_total") == losses
    assert count("orbit_postgres_reconnects_total") == reconnects

    store = await EventStore.connect(url, min_size=1, max_size=1)
    try:
        await store.ping()  # its one connection is open
        killer = await asyncpg.connect(orbit_env.settings.database_url)
        try:
            pid = await killer.fetchval(
                "SELECT pid FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name = $1",
                APPLICATION_NAME,
            )
            assert await killer.fetchval("SELECT pg_terminate_backend($1)", pid)
        finally:
            await killer.close()
        await eventually(
            lambda: asyncio.sleep(0, count("orbit_postgres_connection_losses_total")),
            lambda seen: seen == losses + 1,
            what="the loss counted",
        )

        async def ping() -> bool:
            try:
                await store.ping()
            except OrbitError as error:
                if error.code != "UNAVAILABLE":
                    raise  # anything but "not back yet" fails the test
                return False
            return True

        await eventually(ping, what="the pool reconnected")
        assert count("orbit_postgres_reconnects_total") == reconnects + 1
    finally:
        await store.close()
    # Closing the pool is not a loss.
    await asyncio.sleep(0.05)
    assert count("orbit_postgres_connection_losses_total") == losses + 1
