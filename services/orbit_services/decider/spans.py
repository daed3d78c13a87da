"""OpenTelemetry traces of executions, built from committed events (docs/operations.md).

The ids are derived from the execution (:mod:`orbit_model.trace_ids`), so a
trace is found from an execution id alone.

The execution span of a top-level execution is a root; a child's execution
span is a child of the span of the parent's attempt it answers (the one that
started it, or the latest retry of that step, which re-attaches it), and
every attempt span is a child of its execution's span. The root's id travels
in ``StartChild`` and is kept in the child's ``WorkflowCreated``; a child
started without it (by an older decider) has a trace of its own, linked to
the parent's attempt.

:class:`SpanRecorder` turns the events of a batch into finished spans only
after the batch committed, so nothing is exported that is not durable. Events
carry no timestamps: start and end times are this process's wall clock at the
commit, and the start times of what is open are kept in memory (like
:class:`~orbit_services.decider.step_clock.StepClock`); what a decider restart loses is not
exported. Spans go through the SDK's ``BatchSpanProcessor`` (a bounded queue
and a background thread): when the collector is down, spans are dropped, never
waited for, and counted in ``orbit_trace_spans_dropped_total``.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from orbit_model.events import (
    StepAttemptFailed,
    StepAttemptUncertain,
    StepCancelled,
    StepDispatched,
    StepSucceeded,
    WorkflowCreated,
    WorkflowStarted,
)
from orbit_model.shown_tokens import shown_token
from orbit_model.state import ExecutionState
from orbit_model.trace_ids import attempt_span_id, execution_span_id, trace_id
from orbit_model.units import parse_unit
from orbit_sdk.tracing import span_processor
from orbit_services.runtime.metrics import SPANS_DROPPED, SPANS_RECORDED

log = logging.getLogger("orbit.tracing")

_SCOPE = InstrumentationScope("orbit", None)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def _context(trace_root: str, span_id: int) -> SpanContext:
    return SpanContext(trace_id(trace_root), span_id, is_remote=False, trace_flags=_SAMPLED)


@dataclass
class _Attempt:
    token: str
    attempt: int
    redelivery: bool
    started_ns: int


@dataclass
class _Open:
    started_ns: int | None = None
    attempts: dict[str, _Attempt] | None = None


class SpanRecorder:
    """Makes finished spans of the events an append committed; one per decider.

    Args:
        processor: Where finished spans go (a ``BatchSpanProcessor`` in production).
        service: The ``service.name`` of the spans' resource.
        capacity: Executions whose open spans are tracked, least recently touched dropped.
    """

    def __init__(
        self,
        processor: BatchSpanProcessor | Any,
        service: str = "orbit-decider",
        capacity: int = 50_000,
    ) -> None:
        self.processor = processor
        self.resource = Resource.create({"service.name": service})
        self.capacity = capacity
        self._open: OrderedDict[str, _Open] = OrderedDict()

    @classmethod
    def from_endpoint(cls, endpoint: str | None) -> SpanRecorder | None:
        """A recorder exporting to ``endpoint``, or None when it is not set."""
        if not endpoint:
            return None
        return cls(span_processor(endpoint))

    def committed(
        self,
        before: ExecutionState,
        state: ExecutionState,
        events: Sequence[Any],
        now_ns: int | None = None,
    ) -> None:
        """Record what one committed append (``before`` → ``state``) started and ended."""
        at = time.time_ns() if now_ns is None else now_ns
        execution_id = state.execution_id
        entry = self._entry(execution_id)
        attempts = entry.attempts if entry.attempts is not None else {}
        entry.attempts = attempts
        for event in events:
            if isinstance(event, WorkflowCreated | WorkflowStarted):
                if entry.started_ns is None:
                    entry.started_ns = at
            elif isinstance(event, StepDispatched):
                attempts[event.unit] = _Attempt(event.token, event.attempt, event.redelivery, at)
            elif isinstance(event, StepSucceeded):
                self._end_attempt(
                    state, attempts, event.unit, at, outcome="succeeded", worker_id=event.worker_id
                )
            elif isinstance(event, StepAttemptFailed):
                self._end_attempt(
                    state,
                    attempts,
                    event.unit,
                    at,
                    outcome="failed",
                    error_code=event.error.code,
                    worker_id=event.worker_id,
                )
            elif isinstance(event, StepAttemptUncertain):
                self._end_attempt(state, attempts, event.unit, at, outcome="uncertain")
            elif isinstance(event, StepCancelled):
                self._end_attempt(state, attempts, event.unit, at, outcome="cancelled")
        if state.terminal and not before.terminal:
            self._end_execution(state, entry, at)
            self._open.pop(execution_id, None)

    def shutdown(self) -> None:
        """Export what is queued and stop (blocks: call it off the event loop)."""
        self.processor.shutdown()

    # -- internals ---------------------------------------------------------------

    def _entry(self, execution_id: str) -> _Open:
        entry = self._open.get(execution_id)
        if entry is None:
            entry = self._open[execution_id] = _Open()
            while len(self._open) > self.capacity:
                self._open.popitem(last=False)
        self._open.move_to_end(execution_id)
        return entry

    def _attributes(self, state: ExecutionState) -> dict[str, Any]:
        return {
            "orbit.execution_id": state.execution_id,
            "orbit.workflow": state.workflow,
            "orbit.version": state.version,
        }

    def _end_attempt(
        self,
        state: ExecutionState,
        attempts: dict[str, _Attempt],
        unit: str,
        at: int,
        *,
        outcome: str,
        error_code: str | None = None,
        worker_id: str | None = None,
    ) -> None:
        opened = attempts.pop(unit, None)
        if opened is None:
            return  # dispatched before this process knew the execution
        execution_id = state.execution_id
        attributes = self._attributes(state)
        attributes.update(
            {
                "orbit.unit": unit,
                "orbit.step": _step_of(unit),
                "orbit.attempt": opened.attempt,
                "orbit.token": shown_token(opened.token),  # never its MAC
                "orbit.redelivery": opened.redelivery,
                "orbit.outcome": outcome,
            }
        )
        if error_code is not None:
            attributes["orbit.error_code"] = error_code
        if worker_id is not None:
            attributes["orbit.worker_id"] = worker_id
        span_id = attempt_span_id(execution_id, unit, opened.token)
        root = state.trace_root
        self._emit(
            ReadableSpan(
                name=f"attempt {unit}",
                context=_context(root, span_id),
                parent=_context(root, execution_span_id(execution_id)),
                resource=self.resource,
                attributes=attributes,
                kind=SpanKind.INTERNAL,
                instrumentation_scope=_SCOPE,
                status=Status(StatusCode.ERROR if error_code else StatusCode.UNSET),
                start_time=opened.started_ns,
                end_time=max(at, opened.started_ns),
            )
        )

    def _end_execution(self, state: ExecutionState, entry: _Open, at: int) -> None:
        if entry.started_ns is None:
            return  # started before this process knew it: its start time is lost
        execution_id = state.execution_id
        attributes = self._attributes(state)
        attributes["orbit.outcome"] = str(state.status)
        if state.error is not None:
            attributes["orbit.error_code"] = state.error.code
        parent: SpanContext | None = None
        links: list[Link] = []
        if state.parent_execution_id and state.parent and state.parent_token:
            parent_unit = state.parent[len(state.parent_execution_id) + 1 :]
            parent_span = attempt_span_id(
                state.parent_execution_id, parent_unit, state.parent_token
            )
            attributes["orbit.parent_execution_id"] = state.parent_execution_id
            if state.root_execution_id is not None:
                parent = _context(state.trace_root, parent_span)
            else:
                # Started without its root's id (by an older decider): a trace of its
                # own, linked to the parent's attempt, whose trace is the parent's.
                links.append(Link(_context(state.parent_execution_id, parent_span)))
        self._emit(
            ReadableSpan(
                name=f"execution {state.workflow}",
                context=_context(state.trace_root, execution_span_id(execution_id)),
                parent=parent,
                resource=self.resource,
                attributes=attributes,
                links=links,
                kind=SpanKind.INTERNAL,
                instrumentation_scope=_SCOPE,
                status=Status(StatusCode.OK if state.status == "completed" else StatusCode.ERROR),
                start_time=entry.started_ns,
                end_time=max(at, entry.started_ns),
            )
        )

    def _emit(self, span: ReadableSpan) -> None:
        if _queue_full(self.processor):
            SPANS_DROPPED.inc()
        else:
            SPANS_RECORDED.inc()
        self.processor.on_end(span)


def _step_of(unit: str) -> str:
    try:
        return parse_unit(unit).step
    except Exception:
        return unit


def _queue_full(processor: Any) -> bool:
    """Whether the processor will drop the next span (its private queue is full)."""
    inner = getattr(processor, "_batch_processor", None)
    queue = getattr(inner, "_queue", None)
    size = getattr(inner, "_max_queue_size", None)
    return queue is not None and size is not None and len(queue) >= size


__all__ = ["SpanRecorder"]
