"""The one exception root of Orbit, and the codes it carries.

Every error a user can see has a stable code from :class:`ErrorCode`; the
HTTP status that goes with it travels with the code, so a service never has
to guess how to answer.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """Stable, documented error codes, each with its HTTP status."""

    INVALID_DEFINITION = "INVALID_DEFINITION"
    INVALID_INPUT = "INVALID_INPUT"
    EXPRESSION_ERROR = "EXPRESSION_ERROR"

    @property
    def http_status(self) -> int:
        """The HTTP status an API answers with for this code."""
        return _HTTP_STATUS[self]


_HTTP_STATUS: dict[ErrorCode, int] = {
    ErrorCode.INVALID_DEFINITION: 400,
    ErrorCode.INVALID_INPUT: 400,
    ErrorCode.EXPRESSION_ERROR: 422,
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
