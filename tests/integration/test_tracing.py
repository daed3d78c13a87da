"""Traces against a real OTLP/HTTP endpoint: an in-process receiver that decodes what it gets.

One execution with a retried step: the trace id and span ids are the derived
ones, the execution span parents one span per attempt (the retry is a new
span), and the worker's span sits inside its attempt's span.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from orbit_runtime.tracing import attempt_span_id, execution_span_id, trace_id, traceparent
from orbit_sdk import TaskContext, TaskError, task
from tests.e2e.stack import free_port, running_stack
from tests.integration.conftest import OrbitEnv

WORKFLOW = """
orbit: 1
workflow: traced
version: 1.0.0
tasks:
  flaky: {version: "1"}
steps:
  - id: wobble
    task: flaky
    retry: {max_attempts: 2, initial_interval: 100ms}
output: ${ steps.wobble.output }
"""


@task("flaky", version="1")
async def flaky(inp: Any, ctx: TaskContext) -> dict[str, Any]:
    if ctx.attempt == 1:
        raise TaskError("WOBBLY", "the first attempt always wobbles")
    return {"attempt": ctx.attempt}


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


async def test_a_retried_step_is_two_attempt_spans_under_the_execution(
    orbit_env: OrbitEnv,
) -> None:
    execution_id = "traced-1"
    async with otlp_receiver() as (endpoint, receiver):
        settings = orbit_env.settings_with(otlp_endpoint=endpoint)
        async with running_stack(settings, [flaky]) as stack:
            await stack.client.deploy(WORKFLOW)
            await stack.client.start("traced", None, execution_id=execution_id)
            done = await stack.client.wait(execution_id, timeout=20)
            assert done["status"] == "completed", done
            history = await stack.client.history(execution_id)
        # Stopping flushed the exporters; the receiver may still be parsing the last post.
        for _ in range(50):
            if len(receiver.spans) >= 5:
                break
            await asyncio.sleep(0.1)

    trace = trace_id(execution_id)
    spans = [s for s in receiver.spans if s["trace_id"] == trace]
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

    tokens = [e["data"]["token"] for e in history if e["type"] == "StepDispatched"]
    assert len(tokens) == 2
    attempts = sorted(by_name["attempt wobble"], key=lambda s: s["attributes"]["orbit.attempt"])
    assert [a["span_id"] for a in attempts] == [
        attempt_span_id(execution_id, "wobble", token) for token in tokens
    ]
    assert attempts[0]["span_id"] != attempts[1]["span_id"]  # a retry is a new span
    for attempt in attempts:
        assert attempt["parent_span_id"] == execution["span_id"]
        assert execution["start"] <= attempt["start"] <= attempt["end"] <= execution["end"]
        assert attempt["attributes"]["orbit.step"] == "wobble"
        assert attempt["attributes"]["orbit.unit"] == "wobble"
        assert attempt["attributes"]["orbit.workflow"] == "traced"
    first, second = (a["attributes"] for a in attempts)
    assert (first["orbit.attempt"], first["orbit.outcome"]) == (1, "failed")
    assert first["orbit.error_code"] == "WOBBLY"
    assert (second["orbit.attempt"], second["orbit.outcome"]) == (2, "succeeded")
    assert "orbit.error_code" not in second

    # The worker's spans join the trace, each a child of its attempt's span.
    tasks = sorted(by_name["task flaky"], key=lambda s: s["attributes"]["orbit.attempt"])
    assert [t["parent_span_id"] for t in tasks] == [a["span_id"] for a in attempts]
    assert all(t["service"] == "orbit-worker" for t in tasks)
    assert [t["attributes"]["orbit.worker_id"] for t in tasks] == ["e2e", "e2e"]
    assert [t["attributes"]["orbit.outcome"] for t in tasks] == ["failed", "succeeded"]
    assert tasks[0]["attributes"]["orbit.error_code"] == "WOBBLY"


def test_the_traceparent_names_the_attempt_span() -> None:
    header = traceparent("e-1", "charge", "tok")
    version, trace, span, flags = header.split("-")
    assert (version, flags) == ("00", "01")
    assert int(trace, 16) == trace_id("e-1")
    assert int(span, 16) == attempt_span_id("e-1", "charge", "tok")
    assert attempt_span_id("e-1", "charge", "tok") != attempt_span_id("e-1", "charge", "tok2")
