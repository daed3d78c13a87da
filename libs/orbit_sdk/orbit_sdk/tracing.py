"""OpenTelemetry plumbing (the ``otel`` extra): the OTLP/HTTP exporter, and the worker's task spans.

Spans go through the SDK's ``BatchSpanProcessor`` (a bounded queue and a
background thread): when the collector is down, spans are dropped, never
waited for. The worker's span of a task is a child of the attempt's span,
whose id the decider derived (:mod:`orbit_model.trace_ids`) and sent with the
task as its ``traceparent`` header.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator


def otlp_traces_url(endpoint: str) -> str:
    """``ORBIT_OTLP_ENDPOINT`` (the collector's base URL) → its traces URL."""
    return endpoint.rstrip("/") + "/v1/traces"


def span_exporter(endpoint: str) -> OTLPSpanExporter:
    """An OTLP/HTTP exporter to the collector at ``endpoint``; gives up on it within 5 s."""
    return OTLPSpanExporter(endpoint=otlp_traces_url(endpoint), timeout=5)


def span_processor(endpoint: str) -> BatchSpanProcessor:
    """A batching, never-blocking processor exporting OTLP/HTTP to ``endpoint``."""
    return BatchSpanProcessor(span_exporter(endpoint), schedule_delay_millis=500)


class WorkerTracing:
    """The SDK worker's spans: one around each task, a child of the attempt's span."""

    def __init__(self, endpoint: str, worker_id: str) -> None:
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": "orbit-worker", "orbit.worker_id": worker_id})
        )
        self.provider.add_span_processor(span_processor(endpoint))
        self.tracer = self.provider.get_tracer("orbit_sdk")
        self.worker_id = worker_id

    def task_span(
        self, headers: Mapping[str, Any] | None, name: str, attributes: dict[str, Any]
    ) -> Any:
        """A context manager for the span of one task, joined to ``headers``' trace."""
        carrier = {k: str(v) for k, v in (headers or {}).items() if k == "traceparent"}
        parent = TraceContextTextMapPropagator().extract(carrier)
        attributes = {**attributes, "orbit.worker_id": self.worker_id}
        return self.tracer.start_as_current_span(
            name, context=parent, kind=SpanKind.CONSUMER, attributes=attributes
        )

    def shutdown(self) -> None:
        self.provider.shutdown()
