"""Traces against a real OTLP/HTTP endpoint: an in-process receiver that decodes what it gets.

One execution whose steps are retried, redelivered and a child workflow: the
trace id and span ids are the derived ones, the execution span parents one
span per attempt (a retry and a redelivery are new spans), the child's
execution span sits under the parent's attempt that started it, in the same
trace, and every worker's span sits inside its attempt's span. And spans the
exporter cannot take are dropped, not waited for, and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from prometheus_client import REGISTRY

from orbit_model.events import StepAttemptUncertain, StepDispatched
from orbit_model.messages import DeliveryLost, encode
from orbit_model.state import ExecutionState, replay
from orbit_model.topology import Topology
from orbit_model.trace_ids import attempt_span_id, execution_span_id, trace_id, traceparent
from orbit_model.views import view_json
from orbit_sdk import TaskContext, TaskError, task
from orbit_sdk.amqp import Publisher, connect, open_channel
from orbit_services.decider.spans import SpanRecorder
from orbit_services.runtime.settings import Settings
from orbit_services.store import EventStore
from tests.e2e.stack import free_port, running_stack
from tests.integration.conftest import OrbitEnv
from tests.integration.eventually import eventually

CHILD = """
orbit: 1
workflow: traced-child
version: 1.0.0
tasks:
  leaf: {version: "1"}
steps:
  - id: leaf
    task: leaf
output: ${ steps.leaf.output }
"""

WORKFLOW = """
orbit: 1
workflow: traced
version: 1.0.0
tasks:
  flaky: {version: "1"}
  held: {version: "1"}
steps:
  - id: wobble
    task: flaky
    retry: {max_attempts: 2, initial_interval: 100ms}
  - id: hold
    task: held
  - id: kid
    workflow: traced-child@1.0.0
output: ${ steps.kid.output }
"""

# The first delivery of `held` waits for this; the test declares its worker
# lost meanwhile, so the step is redelivered and the redelivery answers.
released = asyncio.Event()


@task("flaky", version="1")
async def flaky(inp: Any, ctx: TaskContext) -> dict[str, Any]:
    if ctx.attempt == 1:
        raise TaskError("WOBBLY", "the first attempt always wobbles")
    return {"attempt": ctx.attempt}


@task("held", version="1")
async def held(inp: Any, ctx: TaskContext) -> dict[str, Any]:
    if not ctx.redelivery:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(released.wait(), 20)
    return {"redelivery": ctx.redelivery}


@task("leaf", version="1")
async def leaf(inp: Any, ctx: TaskContext) -> dict[str, Any]:
    return {"leaf": ctx.execution_id}


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


class Receiver:
    """POST /v1/traces: the spans sent, decoded, with their resource's attributes."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []

    async def handle(self, request: web.Request) -> web.Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        for resource_spans in message.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        {
                            "name": span.name,
                            "trace_id": int.from_bytes(span.trace_id),
                            "span_id": int.from_bytes(span.span_id),
                            "parent_span_id": (
                                int.from_bytes(span.parent_span_id) if span.parent_span_id else None
                            ),
                            "start": span.start_time_unix_nano,
                            "end": span.end_time_unix_nano,
                            "attributes": {a.key: _value(a.value) for a in span.attributes},
                            "service": resource.get("service.name"),
                        }
                    )
        return web.Response(
            body=b"", content_type="application/x-protobuf"
        )  # an empty ExportTraceServiceResponse


@contextlib.asynccontextmanager
async def otlp_receiver() -> AsyncIterator[tuple[str, Receiver]]:
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/v1/traces", receiver.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield f"http://127.0.0.1:{port}", receiver
    finally:
        await runner.cleanup()


async def _stored(settings: Settings, execution_id: str) -> list[dict[str, Any]]:
    """The history as stored, tokens whole: the API shows none with its MAC."""
    store = await EventStore.connect(settings.database_url, min_size=1, max_size=1)
    try:
        stored = await store.read_events(execution_id)
    finally:
        await store.close()
    return [{"type": e.event.type, "data": e.event.model_dump(mode="json")} for e in stored]


def _tokens(history: list[dict[str, Any]], unit: str) -> list[str]:
    return [
        e["data"]["token"]
        for e in history
        if e["type"] == "StepDispatched" and e["data"]["unit"] == unit
    ]


async def _lose_the_first_delivery_of_hold(stack: Any, execution_id: str) -> None:
    """Tell the decider the worker holding ``hold`` is gone, as the timer service would."""
    history = await eventually(
        lambda: _stored(stack.settings, execution_id),
        lambda h: bool(_tokens(h, "hold")),
        timeout=20,
        what="hold dispatched",
    )
    (token,) = _tokens(history, "hold")
    settings = stack.settings
    route = Topology(settings.namespace, settings.decider_partitions).decider_route(execution_id)
    connection = await connect(settings.amqp_url)
    try:
        publisher = Publisher(await open_channel(connection))
        lost = DeliveryLost(execution_id=execution_id, token=token, reason="the test lost it")
        await publisher.publish(route.exchange, route.routing_key, encode(lost))
    finally:
        await connection.close()


async def test_one_trace_holds_retries_redeliveries_children_and_worker_spans(
    orbit_env: OrbitEnv,
) -> None:
    execution_id = "traced-1"
    child_id = f"{execution_id}:kid"
    released.clear()
    async with otlp_receiver() as (endpoint, receiver):
        settings = orbit_env.settings_with(otlp_endpoint=endpoint)
        async with running_stack(settings, [flaky, held, leaf]) as stack:
            await stack.client.deploy(WORKFLOW, CHILD)
            await stack.client.start("traced", None, execution_id=execution_id)
            await _lose_the_first_delivery_of_hold(stack, execution_id)
            done = view_json(await stack.client.wait(execution_id, timeout=20))
            released.set()  # the lost delivery ends too; its result is stale
            assert done["status"] == "completed", done
            assert done["output"] == {"leaf": child_id}
            history = await _stored(stack.settings, execution_id)
            child_history = await _stored(stack.settings, child_id)
        # Stopping flushed the exporters; the receiver may still be parsing the last post.

        async def received() -> int:
            return len(receiver.spans)

        await eventually(received, lambda n: n >= 13, timeout=30, what="every span received")

    trace = trace_id(execution_id)
    spans = [s for s in receiver.spans if s["trace_id"] == trace]
    assert len(spans) == len(receiver.spans), "every span is in the top-level execution's trace"
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        by_name.setdefault(span["name"], []).append(span)

    (execution,) = by_name["execution traced"]
    assert execution["span_id"] == execution_span_id(execution_id)
    assert execution["parent_span_id"] is None
    assert execution["attributes"]["orbit.workflow"] == "traced"
    assert execution["attributes"]["orbit.version"] == "1.0.0"
    assert execution["attributes"]["orbit.outcome"] == "completed"
    assert execution["service"] == "orbit-decider"

    def attempts_of(unit: str) -> list[dict[str, Any]]:
        found = by_name[f"attempt {unit}"]
        assert all(s["parent_span_id"] == execution["span_id"] for s in found)
        return sorted(found, key=lambda s: s["start"])

    # A retry is a new span, each with its attempt, outcome, error and worker.
    wobble_tokens = _tokens(history, "wobble")
    wobbles = attempts_of("wobble")
    assert [a["span_id"] for a in wobbles] == [
        attempt_span_id(execution_id, "wobble", token) for token in wobble_tokens
    ]
    first, second = (a["attributes"] for a in wobbles)
    assert (first["orbit.attempt"], first["orbit.outcome"]) == (1, "failed")
    assert first["orbit.error_code"] == "WOBBLY"
    assert (second["orbit.attempt"], second["orbit.outcome"]) == (2, "succeeded")
    assert "orbit.error_code" not in second
    # A span names its delivery, never with the token's MAC: a trace is no way to answer.
    assert [a["orbit.token"] for a in (first, second)] == [
        token.rpartition(".")[0] for token in wobble_tokens
    ]
    for attempt in wobbles:
        assert execution["start"] <= attempt["start"] <= attempt["end"] <= execution["end"]
        assert attempt["attributes"]["orbit.step"] == "wobble"
        assert attempt["attributes"]["orbit.workflow"] == "traced"
        assert attempt["attributes"]["orbit.worker_id"] == "e2e"

    # A redelivery is a new span: the lost delivery ends uncertain, the next one answers.
    hold_tokens = _tokens(history, "hold")
    assert len(hold_tokens) == 2
    holds = attempts_of("hold")
    assert [a["span_id"] for a in holds] == [
        attempt_span_id(execution_id, "hold", token) for token in hold_tokens
    ]
    lost, redelivered = (a["attributes"] for a in holds)
    assert (lost["orbit.outcome"], lost["orbit.redelivery"]) == ("uncertain", False)
    assert (redelivered["orbit.outcome"], redelivered["orbit.redelivery"]) == ("succeeded", True)
    assert lost["orbit.attempt"] == redelivered["orbit.attempt"] == 1

    # The child is nested under the parent's attempt that started it, in the same trace.
    (kid_token,) = _tokens(history, "kid")
    (kid_attempt,) = attempts_of("kid")
    assert kid_attempt["span_id"] == attempt_span_id(execution_id, "kid", kid_token)
    (child,) = by_name["execution traced-child"]
    assert child["span_id"] == execution_span_id(child_id)
    assert child["parent_span_id"] == kid_attempt["span_id"]
    assert child["attributes"]["orbit.parent_execution_id"] == execution_id
    assert kid_attempt["start"] <= child["start"] <= child["end"] <= kid_attempt["end"]
    (leaf_token,) = _tokens(child_history, "leaf")
    (leaf_attempt,) = by_name["attempt leaf"]
    assert leaf_attempt["span_id"] == attempt_span_id(child_id, "leaf", leaf_token)
    assert leaf_attempt["parent_span_id"] == child["span_id"]

    # The worker's spans join the trace, each a child of its attempt's span.
    def worker_spans(task_name: str) -> list[dict[str, Any]]:
        return sorted(by_name[f"task {task_name}"], key=lambda s: s["start"])

    assert [t["parent_span_id"] for t in worker_spans("flaky")] == [a["span_id"] for a in wobbles]
    assert sorted(t["parent_span_id"] for t in worker_spans("held")) == sorted(
        a["span_id"] for a in holds
    )
    assert [t["parent_span_id"] for t in worker_spans("leaf")] == [leaf_attempt["span_id"]]
    tasks = worker_spans("flaky")
    assert all(t["service"] == "orbit-worker" for t in tasks)
    assert [t["attributes"]["orbit.worker_id"] for t in tasks] == ["e2e", "e2e"]
    assert [t["attributes"]["orbit.outcome"] for t in tasks] == ["failed", "succeeded"]
    assert tasks[0]["attributes"]["orbit.error_code"] == "WOBBLY"


class _HangingCollector(SpanExporter):
    """An exporter stuck on a collector that does not answer, until released."""

    def __init__(self) -> None:
        self.exporting = threading.Event()
        self.release = threading.Event()
        self.answered = threading.Event()

    def export(self, spans: Any) -> SpanExportResult:
        self.exporting.set()
        self.release.wait(60)
        self.answered.set()
        return SpanExportResult.FAILURE


def test_spans_the_exporter_cannot_take_are_dropped_and_counted() -> None:
    """The collector hangs and the queue holds 2: the rest are dropped at once, and counted."""
    collector = _HangingCollector()
    processor = BatchSpanProcessor(
        collector, max_queue_size=2, max_export_batch_size=1, schedule_delay_millis=10
    )
    recorder = SpanRecorder(processor)
    dropped = REGISTRY.get_sample_value("orbit_trace_spans_dropped_total") or 0.0
    recorded = REGISTRY.get_sample_value("orbit_trace_spans_recorded_total") or 0.0
    state = replay([])

    def one_span(n: int) -> None:
        execution = ExecutionState(execution_id=f"drop-{n}", workflow="w", version="1")
        token = f"t-{n}"
        recorder.committed(state, execution, [StepDispatched(unit="a", attempt=1, token=token)])
        lost = StepAttemptUncertain(unit="a", token=token, reason="")
        recorder.committed(state, execution, [lost])

    one_span(0)
    assert collector.exporting.wait(10)  # the export thread holds span 0, stuck
    for n in range(1, 5):
        one_span(n)
    assert not collector.answered.is_set()  # recorded while the collector hangs: never waited
    assert (REGISTRY.get_sample_value("orbit_trace_spans_recorded_total") or 0.0) - recorded == 3
    assert (REGISTRY.get_sample_value("orbit_trace_spans_dropped_total") or 0.0) - dropped == 2
    collector.release.set()
    processor.shutdown()


def test_the_traceparent_names_the_attempt_span() -> None:
    header = traceparent("root", "root:kid", "charge", "tok")
    version, trace, span, flags = header.split("-")
    assert (version, flags) == ("00", "01")
    assert int(trace, 16) == trace_id("root")
    assert int(span, 16) == attempt_span_id("root:kid", "charge", "tok")
    assert attempt_span_id("e-1", "charge", "tok") != attempt_span_id("e-1", "charge", "tok2")
