"""The codes of how a step or an execution ended, as its history records them.

An :class:`OutcomeCode` is what the engine writes in a ``TaskFailure``'s
``code`` (a failed attempt, a failed step, a failed or timed-out execution)
and what a user reads in the execution's view: data, stored for good, never
raised. A request refused is told by an :class:`~orbit_model.errors.ErrorCode`
instead. A few codes are both, with the same text (an expression over its
budget fails a step, and is a query's refusal too): those are members of both
enums, and ``ErrorCode.TIMEOUT == OutcomeCode.TIMEOUT``, since both are the
string ``"TIMEOUT"``. Stored histories hold the text, so no value here may
change.

A failure may also carry a code that is not an outcome code: that of the error
that ended the step (a child workflow not registered, ``CHILD_NOT_REGISTERED``;
an http step's bad header, ``INVALID_INPUT``; ``INTERNAL``), a task's own
(``CARD_DECLINED``, raised by a worker as a ``TaskError``), and ``HTTP_<status>``
for an http step answered with an error status. Those are kept as they came.
"""

from __future__ import annotations

from enum import StrEnum


class OutcomeCode(StrEnum):
    """How a step or an execution ended, when the engine says so."""

    EXPRESSION_ERROR = "EXPRESSION_ERROR"
    """An expression of the step (its input, its ``if``, the workflow's output) failed."""
    EXPRESSION_LIMIT = "EXPRESSION_LIMIT"
    """An expression went past its evaluation budget (its cost, or the size of a value it
    makes) (docs/workflow-language.md, "Expressions")."""
    TIMEOUT = "TIMEOUT"
    """An attempt, a step or the workflow ran past its timeout."""
    SCHEDULE_TIMEOUT = "SCHEDULE_TIMEOUT"
    """No worker took the attempt's task within its ``schedule_timeout``."""
    HEARTBEAT_TIMEOUT = "HEARTBEAT_TIMEOUT"
    """The task did not heartbeat within its ``heartbeat_timeout``."""
    INPUT_CONTRACT_VIOLATION = "INPUT_CONTRACT_VIOLATION"
    """The step's input breaks its task's input schema."""
    OUTPUT_CONTRACT_VIOLATION = "OUTPUT_CONTRACT_VIOLATION"
    """A task's output, or the workflow's, breaks its output schema."""
    LIMIT_EXCEEDED = "LIMIT_EXCEEDED"
    """The execution went past one of its limits (steps, fan-out, history)."""
    INVALID_FAN_OUT = "INVALID_FAN_OUT"
    """A ``for`` step's expression gave something other than a list."""
    TASK_FAILED = "TASK_FAILED"
    """A task raised an exception other than a ``TaskError`` (retryable)."""
    INVALID_OUTPUT = "INVALID_OUTPUT"
    """A task's output is not JSON data, or cannot be stored (not retryable)."""
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    """A task's output is over ``ORBIT_MAX_PAYLOAD_BYTES`` (not retryable)."""
    ADAPTER_DISABLED = "ADAPTER_DISABLED"
    """An http step while the HTTP adapter is disabled (not retryable)."""
    CHILD_FAILED = "CHILD_FAILED"
    """A child workflow ended other than completed; its id and outcome are in the details."""
    CHILD_ID_TAKEN = "CHILD_ID_TAKEN"
    """The id a child would get belongs to an execution that is not this parent's child."""
    CANCELLED = "CANCELLED"
    """The engine stopped the attempt (the execution was cancelled, or it timed out)."""
    DELIVERY_LIMIT_EXCEEDED = "DELIVERY_LIMIT_EXCEEDED"
    """RabbitMQ delivered the attempt's task message so often without an ack that it
    parked it (a poison task whose worker crashes on it); retryable."""
    MESSAGE_PARKED = "MESSAGE_PARKED"
    """A consumer parked a message the attempt depended on (its result did not decode,
    or kept failing); retryable."""
    HISTORY_UNREADABLE = "HISTORY_UNREADABLE"
    """An event of the execution's stored history no longer decodes (its JSON nests too
    deep, a field no longer validates, its kind is unknown): the decider failed the
    execution, which nothing could be decided for again."""
    # the http steps' own failures (docs/http-steps.md); an error status is HTTP_<status>
    HTTP_INVALID_URL = "HTTP_INVALID_URL"
    HTTP_DESTINATION_FORBIDDEN = "HTTP_DESTINATION_FORBIDDEN"
    HTTP_TIMEOUT = "HTTP_TIMEOUT"
    HTTP_CONNECTION_ERROR = "HTTP_CONNECTION_ERROR"
    HTTP_TLS_ERROR = "HTTP_TLS_ERROR"
    HTTP_RESPONSE_TOO_LARGE = "HTTP_RESPONSE_TOO_LARGE"
    HTTP_TOO_MANY_REDIRECTS = "HTTP_TOO_MANY_REDIRECTS"
