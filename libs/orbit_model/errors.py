"""The one exception root of Orbit, and the codes it carries.

Every error a user can see has a stable code from :class:`ErrorCode`; the
HTTP status that goes with it travels with the code, so a service never has
to guess how to answer.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """Stable, documented error codes, each with its HTTP status."""

    # requests
    INVALID_DEFINITION = "INVALID_DEFINITION"
    INVALID_INPUT = "INVALID_INPUT"
    UNKNOWN_SIGNAL = "UNKNOWN_SIGNAL"
    SIGNAL_PAYLOAD_INVALID = "SIGNAL_PAYLOAD_INVALID"
    EXECUTION_FINISHED = "EXECUTION_FINISHED"
    UNKNOWN_QUERY = "UNKNOWN_QUERY"
    QUERY_FAILED = "QUERY_FAILED"
    INVALID_REQUEST = "INVALID_REQUEST"
    INVALID_IR = "INVALID_IR"
    INVALID_EXECUTION_ID = "INVALID_EXECUTION_ID"
    CHILD_NOT_REGISTERED = "CHILD_NOT_REGISTERED"
    RESERVED_TASK = "RESERVED_TASK"
    NOT_FOUND = "NOT_FOUND"
    WORKFLOW_NOT_FOUND = "WORKFLOW_NOT_FOUND"
    UNKNOWN_SESSION = "UNKNOWN_SESSION"
    DEFINITION_CONFLICT = "DEFINITION_CONFLICT"
    EXECUTION_EXISTS = "EXECUTION_EXISTS"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    UNAVAILABLE = "UNAVAILABLE"
    """Postgres or RabbitMQ cannot be reached; the request may be tried again."""
    INTERNAL = "INTERNAL"
    """A bug in Orbit: the request failed unexpectedly (the server logged why)."""
    # outcomes of steps and executions (carried in TaskFailure.code)
    EXPRESSION_ERROR = "EXPRESSION_ERROR"
    TIMEOUT = "TIMEOUT"
    SCHEDULE_TIMEOUT = "SCHEDULE_TIMEOUT"
    HEARTBEAT_TIMEOUT = "HEARTBEAT_TIMEOUT"
    INPUT_CONTRACT_VIOLATION = "INPUT_CONTRACT_VIOLATION"
    OUTPUT_CONTRACT_VIOLATION = "OUTPUT_CONTRACT_VIOLATION"
    LIMIT_EXCEEDED = "LIMIT_EXCEEDED"
    INVALID_FAN_OUT = "INVALID_FAN_OUT"

    @property
    def http_status(self) -> int:
        """The HTTP status an API answers with for this code."""
        return _HTTP_STATUS[self]


_HTTP_STATUS: dict[ErrorCode, int] = {
    ErrorCode.INVALID_DEFINITION: 400,
    ErrorCode.INVALID_INPUT: 400,
    ErrorCode.UNKNOWN_SIGNAL: 404,
    ErrorCode.SIGNAL_PAYLOAD_INVALID: 422,
    ErrorCode.EXECUTION_FINISHED: 409,
    ErrorCode.UNKNOWN_QUERY: 404,
    ErrorCode.QUERY_FAILED: 422,
    ErrorCode.INVALID_REQUEST: 400,
    ErrorCode.INVALID_IR: 400,
    ErrorCode.INVALID_EXECUTION_ID: 400,
    ErrorCode.CHILD_NOT_REGISTERED: 400,
    ErrorCode.RESERVED_TASK: 400,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.WORKFLOW_NOT_FOUND: 404,
    ErrorCode.UNKNOWN_SESSION: 404,
    ErrorCode.DEFINITION_CONFLICT: 409,
    ErrorCode.EXECUTION_EXISTS: 409,
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.RESOURCE_EXHAUSTED: 429,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.INTERNAL: 500,
    ErrorCode.EXPRESSION_ERROR: 422,
    ErrorCode.TIMEOUT: 504,
    ErrorCode.SCHEDULE_TIMEOUT: 504,
    ErrorCode.HEARTBEAT_TIMEOUT: 504,
    ErrorCode.INPUT_CONTRACT_VIOLATION: 422,
    ErrorCode.OUTPUT_CONTRACT_VIOLATION: 422,
    ErrorCode.LIMIT_EXCEEDED: 422,
    ErrorCode.INVALID_FAN_OUT: 422,
}


class OrbitError(Exception):
    """Base of every error Orbit raises on purpose.

    Attributes:
        code: The stable error code.
        message: A sentence for a person; never a stack trace.
    """

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"{code.value}: {message}")
        self.code = code
        self.message = message

    @property
    def http_status(self) -> int:
        """The HTTP status that goes with :attr:`code`."""
        return self.code.http_status
