"""The ids of an execution's trace, derived from the execution alone (docs/operations.md).

* trace id: the first 16 bytes of ``sha256("orbit-trace:" + ROOT_ID)``, where
  ``ROOT_ID`` is the top-level execution's id: a child execution is in the
  trace of the execution that (perhaps through other children) started it;
* execution span id: the first 8 bytes of ``sha256("orbit-span:" + EXECUTION_ID)``;
* attempt span id: the first 8 bytes of ``sha256(EXECUTION_ID + "\\0" + UNIT + "\\0" + TOKEN)``.
  A token names one delivery, so a retry or a redelivery is a new span and a
  replay of the same events is the same span.

Derived, not drawn: the decider that exports the spans, the task message that
carries the ``traceparent`` and an operator who looks a trace up all compute
the same ids.
"""

from __future__ import annotations

import hashlib


def trace_id(execution_id: str) -> int:
    """The trace id of an execution (128 bits)."""
    return int.from_bytes(hashlib.sha256(f"orbit-trace:{execution_id}".encode()).digest()[:16])


def execution_span_id(execution_id: str) -> int:
    """The span id of an execution's own span (64 bits)."""
    return int.from_bytes(hashlib.sha256(f"orbit-span:{execution_id}".encode()).digest()[:8])


def attempt_span_id(execution_id: str, unit: str, token: str) -> int:
    """The span id of one delivery of a unit (64 bits)."""
    raw = f"{execution_id}\0{unit}\0{token}".encode()
    return int.from_bytes(hashlib.sha256(raw).digest()[:8])


def traceparent(trace_root: str, execution_id: str, unit: str, token: str) -> str:
    """The W3C ``traceparent`` of an attempt: its span is the parent of the worker's.

    ``trace_root`` is the top-level execution (``ExecutionState.trace_root``).
    """
    span = attempt_span_id(execution_id, unit, token)
    return f"00-{trace_id(trace_root):032x}-{span:016x}-01"
