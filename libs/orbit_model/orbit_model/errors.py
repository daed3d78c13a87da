"""The one exception root of Orbit, and the codes it carries.

Every error Orbit raises derives from :class:`OrbitError`, and every code
Orbit itself gives an error is a member of :class:`ErrorCode`; the HTTP status
that goes with it travels with the code, so a service never has to guess how
to answer, and :attr:`ErrorCode.is_transient` says whether the same request may
succeed later. How a step or an execution ended is told by the codes of
:class:`~orbit_model.outcome_codes.OutcomeCode` instead, recorded in its
history (a few codes are both, with the same text). A task's own failure code
comes from outside (``CARD_DECLINED``, raised by a worker as a ``TaskError``)
and is kept as it came. Driver errors (asyncpg, aio-pika) are translated into
OrbitErrors once, where the store and the broker connection meet the drivers.
"""

from __future__ import annotations

import re
from enum import StrEnum
from urllib.parse import urlsplit, urlunsplit

_NEXT_URL = re.compile(r",(?=\s*[A-Za-z][A-Za-z0-9+.-]*://)")
"""A comma that starts another URL of a list (``ORBIT_AMQP_URL`` may name several nodes)."""


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
    TASK_NOT_PERMITTED = "TASK_NOT_PERMITTED"
    """A worker registered a contract its RabbitMQ user may not consume (outside its
    ``--tasks`` patterns)."""
    NOT_FOUND = "NOT_FOUND"
    WORKFLOW_NOT_FOUND = "WORKFLOW_NOT_FOUND"
    UNKNOWN_SESSION = "UNKNOWN_SESSION"
    DEFINITION_CONFLICT = "DEFINITION_CONFLICT"
    EXECUTION_EXISTS = "EXECUTION_EXISTS"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    UNSUPPORTED_MEDIA_TYPE = "UNSUPPORTED_MEDIA_TYPE"
    """A request body of a type the route does not take (JSON, or YAML for definitions)."""
    UNSUPPORTED_VERSION = "UNSUPPORTED_VERSION"
    """A message of a protocol version its consumer does not read (docs/protocol.md,
    "Versions"): the answer names the versions it does."""
    UNAUTHENTICATED = "UNAUTHENTICATED"
    """The request carries no API token the gateway accepts (none, unknown, expired or
    revoked: the answer does not say which)."""
    PERMISSION_DENIED = "PERMISSION_DENIED"
    """The request's token lacks the scope the route needs, or is narrowed to other
    workflows."""
    TOKEN_EXISTS = "TOKEN_EXISTS"
    """An API token of that name exists (revoked ones keep their names)."""
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    UNAVAILABLE = "UNAVAILABLE"
    """Postgres or RabbitMQ cannot be reached; the request may be tried again."""
    INTERNAL = "INTERNAL"
    """A bug in Orbit: the request failed unexpectedly (the server logged why)."""
    INVALID_SETTINGS = "INVALID_SETTINGS"
    """An ``ORBIT_*`` setting cannot be used; the process does not start."""
    CONFLICT = "CONFLICT"
    """Another writer appended to an execution first: re-read and decide again."""
    BAD_ANSWER = "BAD_ANSWER"
    """The gateway answered with something that is not Orbit's API (a proxy's page)."""
    # Raised as errors too, with the same text as the outcome codes of the same name
    # (orbit_model.outcome_codes): an expression's failure is a step's outcome and a
    # query's refusal; a history that no longer reads fails its execution and refuses a
    # request; the CLI's wait runs out.
    EXPRESSION_ERROR = "EXPRESSION_ERROR"
    EXPRESSION_LIMIT = "EXPRESSION_LIMIT"
    """An expression went past its evaluation budget (its cost, or the size of a value it
    makes), or a query's value is larger than ``ORBIT_MAX_PAYLOAD_BYTES``: the step or
    execution fails with it, a query is answered 422 (docs/workflow-language.md,
    "Expressions")."""
    TIMEOUT = "TIMEOUT"
    OUTPUT_CONTRACT_VIOLATION = "OUTPUT_CONTRACT_VIOLATION"
    HISTORY_UNREADABLE = "HISTORY_UNREADABLE"
    """An event of the execution's stored history no longer decodes: a signal, cancel or
    query of the execution is refused (409)."""

    @property
    def http_status(self) -> int:
        """The HTTP status an API answers with for this code."""
        return _HTTP_STATUS[self]

    @property
    def is_transient(self) -> bool:
        """Whether the same request may succeed if tried again later, unchanged:
        Postgres or RabbitMQ away for a while (``UNAVAILABLE``: the store and the broker
        connection say so, having translated their drivers' errors), or a race with
        another writer lost (``CONFLICT``)."""
        return self in _TRANSIENT


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
    ErrorCode.TASK_NOT_PERMITTED: 403,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.WORKFLOW_NOT_FOUND: 404,
    ErrorCode.UNKNOWN_SESSION: 404,
    ErrorCode.DEFINITION_CONFLICT: 409,
    ErrorCode.EXECUTION_EXISTS: 409,
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: 415,
    ErrorCode.UNSUPPORTED_VERSION: 400,
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.PERMISSION_DENIED: 403,
    ErrorCode.TOKEN_EXISTS: 409,
    ErrorCode.RESOURCE_EXHAUSTED: 429,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.INTERNAL: 500,
    ErrorCode.EXPRESSION_ERROR: 422,
    ErrorCode.EXPRESSION_LIMIT: 422,
    ErrorCode.TIMEOUT: 504,
    ErrorCode.OUTPUT_CONTRACT_VIOLATION: 422,
    ErrorCode.INVALID_SETTINGS: 500,
    ErrorCode.CONFLICT: 409,
    ErrorCode.BAD_ANSWER: 502,
    ErrorCode.HISTORY_UNREADABLE: 409,
}


_TRANSIENT = frozenset({ErrorCode.UNAVAILABLE, ErrorCode.CONFLICT})


class OrbitError(Exception):
    """Base of every error Orbit raises on purpose.

    Args:
        code: The stable error code: a member of :class:`ErrorCode`, except for
            the subclasses that carry a code from outside (a ``TaskError``'s own,
            the gateway's answer to a client).
        message: A sentence for a person; never a stack trace.

    Attributes:
        code: As given (an :class:`ErrorCode` is a ``str``, so it compares
            equal to its name).
        message: As given.
    """

    def __init__(self, code: ErrorCode | str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code: ErrorCode | str = code
        self.message = message

    @property
    def http_status(self) -> int:
        """The HTTP status that goes with :attr:`code` (500 for a code from outside)."""
        known = _HTTP_STATUS_BY_NAME.get(str(self.code))
        return 500 if known is None else known

    @property
    def is_transient(self) -> bool:
        """Whether trying again later may succeed (:attr:`ErrorCode.is_transient`; a code
        from outside, as a gateway's answer carries it, by its name)."""
        return self.code in _TRANSIENT


class DefinitionProblem(OrbitError, ValueError):
    """A part of a definition the compiler cannot read (``INVALID_DEFINITION``).

    A ``ValueError`` as well, so pydantic turns one raised in a validator into
    a validation error; its text is the message alone, which the compiler
    places at its line (``orbit_model.problems``).
    """

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_DEFINITION, message)

    def __str__(self) -> str:
        return self.message


_HTTP_STATUS_BY_NAME = {code.value: status for code, status in _HTTP_STATUS.items()}


def redact(url: str) -> str:
    """``url`` without its password, fit for a log line or an error message; each URL
    of a comma-separated list without its own."""
    pieces = _NEXT_URL.split(url)
    if len(pieces) > 1:
        return ",".join(redact(piece) for piece in pieces)
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


def unreachable(service: str, url: str, error: BaseException) -> OrbitError:
    """``UNAVAILABLE``: ``service`` (Postgres, RabbitMQ) at ``url`` cannot be reached.

    The drivers' own errors are translated into this once, where a connection
    is opened (the store, the broker connection), never further in.
    """
    return OrbitError(
        ErrorCode.UNAVAILABLE, f"cannot connect to {service} at {redact(url)}: {error}"
    )
