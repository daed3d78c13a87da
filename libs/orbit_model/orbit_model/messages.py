"""The bodies of every message Orbit sends over RabbitMQ.

Each is a frozen pydantic model with a ``type`` tag and a protocol version
``v``, serialised as JSON. A consumer decodes through one of the unions below
and treats anything it cannot decode as poison (dead-lettered, never
retried). Unknown fields are ignored, so a newer sender can add fields
without breaking an older consumer. A change that would break a worker or
client written to the previous docs bumps the version of the kinds it
concerns, and the previous version stays accepted for a documented window
(docs/protocol.md, "Versions"): the kinds workers and clients send are at
version 2 (:class:`_Sent`), which carries the sender's RabbitMQ user in the
AMQP ``user_id``; version 1 did not have to. A version a consumer does not
read is refused as ``UNSUPPORTED_VERSION``, naming the ones it does.

The flows (see ``docs/protocol.md``):

- clients -> ``commands``: :class:`StartExecution`, :class:`SignalExecution`,
  :class:`CancelExecution`, answered with a :class:`CommandReply` on
  ``reply_to`` when one is given;
- anything -> ``decider`` (routed by execution id): :class:`Wake`,
  :class:`TaskResult`, :class:`TimerDue`, :class:`DeliveryLost`,
  :class:`StartChild`, :class:`CancelChild`, :class:`MessageParked`;
- decider -> a task queue (through ``tasks``): :class:`TaskAssignment`;
- workers <-> ``control`` (request and reply): :class:`RegisterWorker`,
  :class:`Heartbeat`, :class:`UnregisterWorker`, answered with
  :class:`Registration`, :class:`HeartbeatReply`, :class:`Unregistered` or
  :class:`ControlError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.events import TaskFailure
from orbit_model.names import REQUEST_ID
from orbit_model.repeated_starts import OnConflict

PROTOCOL_VERSION: Literal[2] = 2
"""The version of the protocol this code is written to: what workers and clients send."""
PREVIOUS_VERSION: Literal[1] = 1
"""The previous version, still accepted from workers and clients (docs/protocol.md,
"Versions", says until when)."""
FROM_THE_WIRE = "from_the_wire"
"""Validation context key: the body came from the broker, where a missing ``v`` is 1."""

T = TypeVar("T")


class _Body(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class _Message(_Body):
    """A kind unchanged since version 1, which only Orbit's services send, or which
    they send to workers and clients (who read version 1 of it)."""

    v: Literal[1] = 1


class _Sent(_Body):
    """A kind workers and clients send. Version 2 (since per-role RabbitMQ users) carries
    the sender's user in the AMQP ``user_id``; version 1, the same body, did not have
    to, and is accepted for the window docs/protocol.md gives."""

    v: Literal[1, 2] = PROTOCOL_VERSION

    @model_validator(mode="before")
    @classmethod
    def _unversioned_is_version_1(cls, data: object, info: ValidationInfo) -> object:
        # The docs of version 1 said a body without `v` is version 1; a model built in
        # code is of this code's version.
        wire = bool(info.context and info.context.get(FROM_THE_WIRE))
        if wire and isinstance(data, dict) and "v" not in data:
            return {**data, "v": PREVIOUS_VERSION}
        return data


# -- commands (clients -> gateway) ------------------------------------------


class StartExecution(_Sent):
    """Start an execution; idempotent when ``execution_id`` is given."""

    type: Literal["StartExecution"] = "StartExecution"
    workflow: str
    version: str | None = None
    """None: the highest registered version."""
    input: JsonValue = None
    execution_id: str | None = None
    on_conflict: OnConflict = "fail"
    """When ``execution_id`` exists and was started otherwise (another version or
    input): ``fail`` refuses with ``EXECUTION_EXISTS``; ``use_existing`` answers
    ``created: false`` with the existing execution. The same start again is always
    ``created: false``; another workflow's id is always refused."""


class SignalExecution(_Sent):
    type: Literal["SignalExecution"] = "SignalExecution"
    execution_id: str
    name: str
    payload: JsonValue = None
    request_id: str | None = None
    """The signal's identity within its execution: one sent again with the same id is
    recorded once (the reply names the first one's seq). Without one, the gateway uses
    the message's AMQP ``message_id``, so a redelivered message is recorded once too."""

    def identified(self, message_id: str | None) -> SignalExecution:
        """This signal, known by the AMQP ``message_id`` if it has no ``request_id`` (and
        the message id is one a request id may be)."""
        if self.request_id is not None or not message_id or not REQUEST_ID.fullmatch(message_id):
            return self
        return self.model_copy(update={"request_id": message_id})


class CancelExecution(_Sent):
    type: Literal["CancelExecution"] = "CancelExecution"
    execution_id: str
    reason: str = ""


class ErrorBody(BaseModel):
    """An error as clients see it: the same shape as the HTTP API's."""

    model_config = ConfigDict(frozen=True)

    code: str
    message: str


class CommandReply(_Message):
    """The answer to a command, sent to its ``reply_to`` with its correlation id."""

    type: Literal["CommandReply"] = "CommandReply"
    ok: bool
    result: JsonValue = None
    """For a start ``{execution_id, created}``; for a signal ``{seq}``; for a cancel ``{}``."""
    error: ErrorBody | None = None


Command = Annotated[StartExecution | SignalExecution | CancelExecution, Field(discriminator="type")]


# -- decider inputs (routed by execution id) --------------------------------


class Wake(_Message):
    """Something was appended to the execution: decide again."""

    type: Literal["Wake"] = "Wake"
    execution_id: str


class TaskResult(_Sent):
    """A worker's answer to one :class:`TaskAssignment`: an output or an error."""

    type: Literal["TaskResult"] = "TaskResult"
    execution_id: str
    token: str
    output: JsonValue = None
    error: TaskFailure | None = None
    worker_id: str | None = None
    started_at: int | None = None
    """When the worker began the task (its clock, epoch ms): for schedule-to-start."""
    fan_out_used: int | None = None
    """A child's outcome only: what of the fan-out budget its parent gave it its tree used
    (the rest goes back to the parent). Read from Orbit's own users only."""


class TimerDue(_Message):
    """A timer of the execution is due (sent by the timer service)."""

    type: Literal["TimerDue"] = "TimerDue"
    execution_id: str
    key: str
    due_at: int | None = None
    """When it was due (epoch ms): the decider accepts it even if its clock is a bit behind."""


class DeliveryLost(_Message):
    """The worker holding ``token`` is gone; the attempt is uncertain."""

    type: Literal["DeliveryLost"] = "DeliveryLost"
    execution_id: str
    token: str
    reason: str = "worker lost"


class StartChild(_Message):
    """Start a child execution for a parent's ``workflow:`` step (routed by the child's id).

    The child id is derived from the parent's id and unit, so a retried start
    finds the child already there and does not start a second one.
    """

    type: Literal["StartChild"] = "StartChild"
    execution_id: str
    """The child's id."""
    definition_hash: str
    input: JsonValue = None
    parent: str
    """``PARENT_ID:UNIT``, for people."""
    parent_execution_id: str
    parent_token: str
    root_execution_id: str | None = None
    """The top-level execution the parent descends from: the child joins its trace."""
    fan_out_budget: int | None = None
    """The ``for`` elements the child's whole tree may fan out: its share of its parent's
    budget (None: unbounded, as ``ORBIT_MAX_FAN_OUT`` is not set)."""


class CancelChild(_Message):
    """The parent of this child stopped while the child ran: cancel it too."""

    type: Literal["CancelChild"] = "CancelChild"
    execution_id: str
    """The child's id."""
    parent_execution_id: str
    """Only the child of this parent is cancelled."""
    reason: str = ""


class MessageParked(_Message):
    """A queue parked a message concerning this execution (told by the dispatcher,
    which reads the copies in ``NS.dead-letter.reports``).

    When the parked message was about one delivery (``token``), that attempt
    fails, so the step's retry policy applies; otherwise the execution records
    that the message was lost.
    """

    type: Literal["MessageParked"] = "MessageParked"
    execution_id: str
    message_type: str
    """The parked message's ``type`` (``TaskAssignment``, ``TaskResult``, ...)."""
    token: str | None = None
    """The delivery the parked message was about, if any."""
    queue: str = ""
    """The queue that parked it."""
    reason: str = ""
    """RabbitMQ's reason: ``delivery_limit`` (delivered too often), ``rejected`` (its
    consumer parked it), ``expired``, ``maxlen``."""
    delivery_count: int | None = None
    """How often it was delivered, when known (the delivery limit + 1 for ``delivery_limit``)."""
    worker_id: str | None = None
    """The last worker known to have held it."""
    detail: str = ""
    """What else identifies it: a signal's name, a timer's key."""
    sender: str | None = None
    """The RabbitMQ user that sent the parked message (its AMQP ``user_id``): the decider
    takes a parked result as it takes a result, only from a user that may answer its task.
    None: not known (a dispatcher older than this field)."""


DeciderInput = Annotated[
    Wake | TaskResult | TimerDue | DeliveryLost | StartChild | CancelChild | MessageParked,
    Field(discriminator="type"),
]


# -- dispatch (decider -> dispatcher -> workers) ----------------------------


class Route(BaseModel):
    """Where a worker publishes its result: an exchange and a routing key."""

    model_config = ConfigDict(frozen=True)

    exchange: str
    routing_key: str


class TaskAssignment(_Message):
    """One attempt of a task: what the decider dispatches and a worker receives.

    Its AMQP header ``traceparent`` is the W3C trace context of the attempt's span.
    """

    type: Literal["TaskAssignment"] = "TaskAssignment"
    execution_id: str
    workflow: str
    unit: str
    task: str
    task_version: str
    token: str
    """Names this delivery; the result must carry it back."""
    attempt: int
    idempotency_key: str
    """``EXECUTION_ID:UNIT``: the same for every attempt and redelivery of the unit."""
    redelivery: bool = False
    """True when an earlier delivery of this attempt may have run (its worker was lost)."""
    input: JsonValue = None
    result_route: Route


# -- worker control (request and reply) -------------------------------------


@dataclass(frozen=True)
class Outgoing:
    """A message the pure core asks to publish once the events that call for it commit."""

    route: Route
    message: TaskAssignment | StartChild | CancelChild | TaskResult
    headers: Mapping[str, str] | None = None
    """AMQP headers (a task's ``traceparent``)."""


class ContractAnnouncement(BaseModel):
    """A task a worker serves, with the JSON Schemas of its input and output."""

    model_config = ConfigDict(frozen=True)

    task: str
    version: str
    input_schema: JsonValue = None
    output_schema: JsonValue = None


class RegisterWorker(_Sent):
    type: Literal["RegisterWorker"] = "RegisterWorker"
    worker_id: str
    runtime: str = "python"
    sdk: str | None = None
    contracts: tuple[ContractAnnouncement, ...]


class InflightTask(BaseModel):
    """A task a worker holds: its execution and delivery token."""

    model_config = ConfigDict(frozen=True)

    execution_id: str
    token: str
    heartbeat_at: int | None = None
    """Epoch ms the task started or last heartbeated (``ctx.heartbeat()``), by the
    worker's clock; as recorded by the dispatcher, by Postgres's."""
    heartbeat_age_ms: int | None = Field(default=None, ge=0)
    """How long ago, as the worker sends the heartbeat, the task last heartbeated: the
    dispatcher turns it into Postgres's time, so the worker's clock does not matter
    (a worker 60 s behind failed every task it heartbeated). Preferred over
    ``heartbeat_at``; never stored."""


class Heartbeat(_Sent):
    type: Literal["Heartbeat"] = "Heartbeat"
    session_id: str
    inflight: tuple[InflightTask, ...] = ()
    """The tasks the worker holds now."""


class UnregisterWorker(_Sent):
    type: Literal["UnregisterWorker"] = "UnregisterWorker"
    session_id: str


ControlRequest = Annotated[
    RegisterWorker | Heartbeat | UnregisterWorker, Field(discriminator="type")
]


class Registration(_Message):
    type: Literal["Registration"] = "Registration"
    session_id: str
    heartbeat_interval_ms: int
    session_timeout_ms: int
    task_queues: dict[str, str]
    """``task@version`` to the name of the queue the worker consumes."""
    warnings: tuple[str, ...] = ()


class HeartbeatReply(_Message):
    type: Literal["HeartbeatReply"] = "HeartbeatReply"
    cancel: tuple[str, ...] = ()
    """Tokens whose tasks should stop (cancelled, timed out or superseded)."""


class Unregistered(_Message):
    """The answer to :class:`UnregisterWorker`: the session is closed."""

    type: Literal["Unregistered"] = "Unregistered"
    lost: int = 0
    """Tasks the session still held, reported to the decider as lost."""


class ControlError(_Message):
    type: Literal["ControlError"] = "ControlError"
    error: ErrorBody


ControlReply = Annotated[
    Registration | HeartbeatReply | Unregistered | ControlError, Field(discriminator="type")
]


# -- decoding ---------------------------------------------------------------

_COMMAND: TypeAdapter[Command] = TypeAdapter(Command)
_DECIDER_INPUT: TypeAdapter[DeciderInput] = TypeAdapter(DeciderInput)
_CONTROL_REQUEST: TypeAdapter[ControlRequest] = TypeAdapter(ControlRequest)
_CONTROL_REPLY: TypeAdapter[ControlReply] = TypeAdapter(ControlReply)


class MalformedMessage(OrbitError):
    """A message body that is not what its queue carries: poison, never retried.

    Its code is ``UNSUPPORTED_VERSION`` when the body is of a version its consumer does
    not read (whatever else is wrong with it: another version may have another shape),
    else ``INVALID_REQUEST``.
    """

    def __init__(
        self, what: str, error: ValidationError | ValueError, kind: str | None = None
    ) -> None:
        version = _version_problem(kind, error) if isinstance(error, ValidationError) else None
        if version is not None:
            super().__init__(ErrorCode.UNSUPPORTED_VERSION, version)
            return
        detail = error.errors()[0]["msg"] if isinstance(error, ValidationError) else str(error)
        super().__init__(ErrorCode.INVALID_REQUEST, f"not a valid {what}: {detail}")


def _version_problem(kind: str | None, error: ValidationError) -> str | None:
    """What is wrong with the body's ``v``, if that is what is wrong; ``kind``: the
    message's type, when one model is decoded (a union's error names it first)."""
    for problem in error.errors():
        location = problem["loc"]
        if location and location[-1] == "v" and problem["type"] == "literal_error":
            kind = str(location[0]) if len(location) > 1 else kind
            readable = problem.get("ctx", {}).get("expected", "")
            return (
                f"{kind} version {problem['input']!r} is not supported: this Orbit reads"
                f' version {readable} of it (docs/protocol.md, "Versions")'
            )
    return None


_WIRE = {FROM_THE_WIRE: True}


def _decode(adapter: TypeAdapter[T], body: bytes, what: str) -> T:
    try:
        return adapter.validate_json(body, context=_WIRE)
    except ValidationError as error:
        raise MalformedMessage(what, error) from None


def decode_command(body: bytes) -> Command:
    return _decode(_COMMAND, body, "command")


def decode_decider_input(body: bytes) -> DeciderInput:
    return _decode(_DECIDER_INPUT, body, "decider input")


def decode_control_request(body: bytes) -> ControlRequest:
    return _decode(_CONTROL_REQUEST, body, "control request")


def decode_control_reply(body: bytes) -> ControlReply:
    return _decode(_CONTROL_REPLY, body, "control reply")


def decode_assignment(body: bytes) -> TaskAssignment:
    try:
        return TaskAssignment.model_validate_json(body, context=_WIRE)
    except ValidationError as error:
        raise MalformedMessage("task assignment", error, "TaskAssignment") from None


def encode(message: BaseModel) -> bytes:
    """The JSON body of a message."""
    return message.model_dump_json().encode()
