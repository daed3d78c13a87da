"""What an execution waits for, as ``GET /v1/executions/{id}`` tells it, with every service running.

Each kind of wait, through the gateway: a worker no one runs, a worker that
holds the task, a signal, a retry and its time, a sleep's timer, a child, and
a step behind others. Then the ops files (Prometheus, Grafana) parse.
"""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import REGISTRY

from orbit_model.views import view_json
from orbit_sdk import OrbitClientError, TaskContext, TaskError, task
from tests.e2e.stack import running_stack
from tests.integration.conftest import OrbitEnv
from tests.integration.eventually import eventually
from tests.views import as_sent

ROOT = Path(__file__).resolve().parents[2]

# One step of each kind of waiting, all at once.
WAITS = """
orbit: 1
workflow: waits
version: 1.0.0
signals: {approval: {}}
tasks:
  flaky: {version: "1"}
  charge-card: {version: "2"}
  pack: {version: "1"}
steps:
  - id: approve
    await: approval
    timeout: 1h
  - id: nap
    sleep: 1h
    after: []
  - id: flaky
    task: flaky
    retry: {max_attempts: 3, initial_interval: 1h}
    after: []
  - id: charge
    task: charge-card
    after: []
  - id: fan
    for: [1, 2]
    task: charge-card
    input: ${ item }
    after: []
  - id: ship
    task: pack
    after: [approve, charge]
"""

HELD = """
orbit: 1
workflow: held
version: 1.0.0
tasks:
  slow: {version: "1"}
steps:
  - id: slow
    task: slow
"""

CHILD = """
orbit: 1
workflow: invoice
version: 1.0.0
signals: {paid: {}}
steps:
  - id: paid
    await: paid
"""

PARENT = """
orbit: 1
workflow: order
version: 1.0.0
steps:
  - id: invoice
    workflow: invoice@1.0.0
"""

RELEASE = asyncio.Event()


@task("flaky", version="1")
async def flaky(inp: Any, ctx: TaskContext) -> None:
    raise TaskError("FLAKY", "not today")


@task("slow", version="1")
async def slow(inp: Any, ctx: TaskContext) -> str:
    await RELEASE.wait()
    return "done"


def _at(iso: str) -> datetime:
    assert iso.endswith("Z"), iso
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))


def _about_an_hour_from_now(iso: str) -> bool:
    left = _at(iso) - datetime.now(UTC)
    return timedelta(minutes=58) < left <= timedelta(hours=1)


async def test_each_wait_of_a_running_execution(orbit_env: OrbitEnv) -> None:
    async with running_stack(orbit_env.settings, [flaky]) as stack:
        await stack.client.deploy(WAITS)
        await stack.client.start("waits", execution_id="w-1")

        def settled(view: dict[str, Any]) -> bool:
            statuses = {step: v["status"] for step, v in view["steps"].items()}
            return statuses["flaky"] == "retry_wait" and statuses["charge"] == "dispatched"

        view = await eventually(lambda: as_sent(stack.client.get("w-1")), settled, what="the waits")
        steps = view["steps"]
        assert {step: v["kind"] for step, v in steps.items()} == {
            "approve": "await",
            "nap": "sleep",
            "flaky": "task",
            "charge": "task",
            "fan": "for",
            "ship": "task",
        }

        # A task no worker serves: the worker serves flaky@1 only.
        charge = steps["charge"]["waiting_for"]
        assert charge["kind"] == "worker"
        assert (charge["task"], charge["workers_online"], charge["held_by"]) == (
            "charge-card@2",
            0,
            None,
        )
        assert charge["attempt"] == 1

        approve = steps["approve"]["waiting_for"]
        assert (approve["kind"], approve["name"]) == ("signal", "approval")
        assert _about_an_hour_from_now(approve["timeout_at"])

        retry = steps["flaky"]["waiting_for"]
        assert (retry["kind"], retry["attempt"], retry["last_error"]) == ("retry", 2, "FLAKY")
        assert _about_an_hour_from_now(retry["at"])

        timer = steps["nap"]["waiting_for"]
        assert timer["kind"] == "timer"
        assert _about_an_hour_from_now(timer["at"])

        assert steps["fan"]["waiting_for"] == {
            "kind": "elements",
            "total": 2,
            "counts": {"dispatched": 2},
            "task": "charge-card@2",
            "workers_online": 0,
            "held": 0,
        }
        # Behind a signal and a worker: only the steps not done yet are named.
        assert steps["ship"]["waiting_for"] == {
            "kind": "dependencies",
            "steps": ["approve", "charge"],
        }

        # The execution's answer to "why is it stuck": every step's own reason.
        reasons = {wait["step"]: wait["kind"] for wait in view["waiting_for"]}
        assert reasons == {
            "approve": "signal",
            "nap": "timer",
            "flaky": "retry",
            "charge": "worker",
            "fan": "elements",
        }

        # Once the signal arrives, ship waits for charge alone.
        await stack.client.signal("w-1", "approval", {})
        view = await eventually(
            lambda: as_sent(stack.client.get("w-1")),
            lambda v: v["steps"]["approve"]["status"] == "succeeded",
            what="the signal taken",
        )
        assert view["steps"]["approve"]["waiting_for"] is None
        assert view["steps"]["ship"]["waiting_for"]["steps"] == ["charge"]

        # An ended execution waits for nothing.
        await stack.client.cancel("w-1", "enough")
        ended = view_json(await stack.client.wait("w-1", timeout=20))
        assert ended["status"] == "cancelled"
        assert ended["waiting_for"] == []
        assert all(v["waiting_for"] is None for v in ended["steps"].values())


async def test_a_task_a_worker_holds_names_the_worker(orbit_env: OrbitEnv) -> None:
    RELEASE.clear()
    settings = orbit_env.settings_with(heartbeat_interval_ms=100)
    async with running_stack(settings, [slow]) as stack:
        await stack.client.deploy(HELD)
        await stack.client.start("held", execution_id="h-1")

        def held(view: dict[str, Any]) -> bool:
            wait = view["steps"]["slow"]["waiting_for"]
            return wait is not None and wait.get("held_by") is not None

        view = await eventually(
            lambda: as_sent(stack.client.get("h-1")), held, what="the task held"
        )
        assert view["steps"]["slow"]["waiting_for"] == {
            "kind": "worker",
            "task": "slow@1",
            "workers_online": 1,
            "held_by": "e2e",
            "attempt": 1,
            "timeout_at": None,
        }
        assert view["waiting_for"] == [{"step": "slow", **view["steps"]["slow"]["waiting_for"]}]

        RELEASE.set()
        done = view_json(await stack.client.wait("h-1", timeout=20))
        assert done["status"] == "completed"
        assert done["steps"]["slow"]["waiting_for"] is None
        assert done["waiting_for"] == []


async def test_a_parent_names_the_child_it_waits_for(orbit_env: OrbitEnv) -> None:
    async with running_stack(orbit_env.settings) as stack:
        await stack.client.deploy(PARENT, CHILD)
        await stack.client.start("order", execution_id="order-7")

        view = await eventually(
            lambda: as_sent(stack.client.get("order-7")),
            lambda v: v["steps"]["invoice"]["status"] == "dispatched",
            what="the child started",
        )
        assert view["steps"]["invoice"]["kind"] == "workflow"
        assert view["steps"]["invoice"]["waiting_for"] == {
            "kind": "child",
            "execution_id": "order-7:invoice",
            "workflow": "invoice@1.0.0",
            "attempt": 1,
        }
        assert view["steps"]["invoice"]["children"] == ["order-7:invoice"]

        # And the child says what it, in turn, waits for.
        async def child_view() -> dict[str, Any] | None:
            try:
                return view_json(await stack.client.get("order-7:invoice"))
            except OrbitClientError:
                return None  # its StartChild may still be on its way

        child = await eventually(
            child_view,
            lambda v: v is not None and v["steps"]["paid"]["status"] == "scheduled",
            what="the child waiting",
        )
        assert child is not None
        assert child["waiting_for"] == [
            {"step": "paid", "kind": "signal", "name": "paid", "timeout_at": None}
        ]


def test_the_ops_files_parse() -> None:
    scrape = yaml.safe_load((ROOT / "ops/prometheus/prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in scrape["scrape_configs"]}
    assert jobs["orbit-gateway"]["static_configs"][0]["targets"] == ["gateway:8080"]
    assert {"orbit-decider", "orbit-dispatcher", "orbit-timer"} <= set(jobs)
    assert all(job["metrics_path"] == "/metrics" for job in jobs.values())

    dashboard = json.loads((ROOT / "ops/grafana/orbit-dashboard.json").read_text())
    assert (dashboard["title"], dashboard["uid"]) == ("Orbit", "orbit-overview")
    assert dashboard["schemaVersion"] >= 30
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    exprs = " ".join(t["expr"] for panel in panels for t in panel["targets"])
    for metric in (
        "orbit_executions_started_total",
        "orbit_executions_finished_total",
        "orbit_steps_failed_total",
        "orbit_steps_retried_total",
        "orbit_step_duration_seconds_bucket",
        "orbit_decider_batch_inputs_bucket",
        "orbit_decider_commit_seconds_bucket",
        "orbit_outbox_depth",
        "orbit_outbox_relay_lag_seconds_bucket",
        "orbit_timers_due",
        "orbit_timer_lateness_seconds_bucket",
        "orbit_executions_active",
        "orbit_step_schedule_to_start_seconds_bucket",
        "orbit_postgres_connection_losses_total",
        "orbit_amqp_connection_losses_total",
        "orbit_worker_sessions_online",
        "orbit_messages_parked_total",
    ):
        assert metric in exprs, metric
    # Every metric a panel names is one Orbit exports.
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"], "gauge": [""]}
    exported = {
        family.name + suffix
        for family in REGISTRY.collect()
        for suffix in suffixes.get(family.type, [""])
    }
    for named in set(re.findall(r"orbit_[a-z_]+", exprs)):
        assert named in exported, f"the dashboard names {named}, which no service exports"
    for panel in panels:
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"])
        assert all(t["expr"] and t["refId"] for t in panel["targets"])
