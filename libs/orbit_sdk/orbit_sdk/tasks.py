"""Task functions: the ``@task`` decorator, the context a task runs with, its errors.

A task is an ``async def`` taking its input (a pydantic model or a plain
``dict``) and optionally a :class:`TaskContext`, returning its output (a
pydantic model or JSON data)::

    @task("charge-card", version="2")
    async def charge_card(inp: ChargeIn, ctx: TaskContext) -> ChargeOut: ...

The decorator leaves the function as it is (it can be called directly in a
unit test) and attaches a :class:`TaskDefinition`, which turns an input off
the wire into a result for the wire: outcomes, not exceptions.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, JsonValue, ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python

from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.outcome_codes import OutcomeCode

if TYPE_CHECKING:
    # The messages' models are built when a task is announced or run, not when a
    # module defines one: building them loads pydantic's plugins and the rest.
    from orbit_model.events import TaskFailure
    from orbit_model.messages import ContractAnnouncement

log = logging.getLogger("orbit.worker")

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

TASK_FAILED = OutcomeCode.TASK_FAILED
"""The code of a failure from an exception other than :class:`TaskError` (retryable)."""
INVALID_OUTPUT = OutcomeCode.INVALID_OUTPUT
"""The code of a failure from an output that is not JSON data (not retryable)."""

_ATTRIBUTE = "__orbit_task__"


class TaskError(OrbitError):
    r"""A failure the task reports on purpose, with a code workflows can match.

    Its code is the task's own, not one of Orbit's :class:`ErrorCode`\ s.

    Args:
        code: A stable code, such as ``CARD_DECLINED``; retry policies'
            ``non_retryable`` lists name these.
        message: For people.
        retryable: False when trying again cannot help.
        details: JSON data recorded with the failure.
    """

    def __init__(
        self, code: str, message: str, retryable: bool = True, details: JsonValue = None
    ) -> None:
        super().__init__(code, message)
        self.retryable = retryable
        self.details = details


async def _no_heartbeat() -> None:
    return None


@dataclass
class TaskContext:
    """What a running task knows of its attempt.

    Attributes:
        execution_id: The execution the task belongs to.
        idempotency_key: ``EXECUTION_ID:UNIT``, the same for every attempt and
            redelivery: use it to make side effects happen once.
        attempt: 1 for the first attempt, 2 for the first retry, ...
        redelivery: True when an earlier delivery of this attempt may have run
            (its worker was lost, or it was given back).
        token: Names this delivery.
        unit: The unit of the execution (``charge``, ``ship[3]``, ...).
        workflow: The workflow's name.
        cancelled: Set when the engine asks the task to stop (the execution
            was cancelled, or this attempt timed out or was superseded).
    """

    execution_id: str = ""
    idempotency_key: str = ""
    attempt: int = 1
    redelivery: bool = False
    token: str = ""
    unit: str = ""
    workflow: str = ""
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    _send_heartbeat: Callable[[], Awaitable[None]] = field(default=_no_heartbeat, repr=False)

    async def heartbeat(self) -> None:
        """Tell the engine the task is alive now; a stop request sets :attr:`cancelled`.

        Never raises: a heartbeat that cannot be delivered is logged.
        """
        await self._send_heartbeat()


@dataclass(frozen=True)
class TaskOutcome:
    """A task's answer for the wire: an output, or an error."""

    output: JsonValue = None
    error: TaskFailure | None = None


def _model(hint: Any) -> type[BaseModel] | None:
    return hint if isinstance(hint, type) and issubclass(hint, BaseModel) else None


def _failure(code: str, message: str, retryable: bool, details: JsonValue = None) -> TaskOutcome:
    from orbit_model.events import TaskFailure  # noqa: PLC0415  (see the imports)

    return TaskOutcome(
        error=TaskFailure(code=code, message=message, retryable=retryable, details=details)
    )


def _validation_message(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in item['loc']) or '(input)'}: {item['msg']}"
        for item in error.errors()
    )


@dataclass(frozen=True)
class TaskDefinition:
    """A task function with its contract.

    Attributes:
        name: The task name workflows call.
        version: The contract version.
        fn: The function.
        input_model: The pydantic model of its input; None for plain data.
        output_model: The pydantic model of its output; None for plain data.
        takes_context: Whether it takes a :class:`TaskContext` after its input.
    """

    name: str
    version: str
    fn: Callable[..., Awaitable[Any]]
    input_model: type[BaseModel] | None
    output_model: type[BaseModel] | None
    takes_context: bool

    @property
    def key(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def contract(self) -> ContractAnnouncement:
        """The contract announced at registration: JSON Schemas from the models."""
        from orbit_model.messages import ContractAnnouncement  # noqa: PLC0415  (see the imports)

        return ContractAnnouncement(
            task=self.name,
            version=self.version,
            input_schema=None if self.input_model is None else self.input_model.model_json_schema(),
            output_schema=(
                None if self.output_model is None else self.output_model.model_json_schema()
            ),
        )

    async def run(self, data: JsonValue, ctx: TaskContext) -> TaskOutcome:
        """Parse the input, run the function, serialise the output; failures as outcomes.

        A :class:`TaskError` keeps its code; an input that does not match the
        model is ``INVALID_INPUT`` (not retryable); any other exception is
        ``TASK_FAILED`` (retryable). Cancelling the run cancels the function.
        """
        argument: Any = data
        if self.input_model is not None:
            try:
                argument = self.input_model.model_validate(data)
            except ValidationError as error:
                return _failure(
                    ErrorCode.INVALID_INPUT.value,
                    f"input does not match {self.input_model.__name__}: "
                    + _validation_message(error),
                    retryable=False,
                )
        try:
            if self.takes_context:
                result = await self.fn(argument, ctx)
            else:
                result = await self.fn(argument)
        except TaskError as error:
            return _failure(error.code, error.message, error.retryable, error.details)
        except Exception as error:
            log.warning(
                "task %s failed in %s",
                self.key,
                ctx.execution_id,
                exc_info=True,
                extra={"action": "task.failed", "execution_id": ctx.execution_id},
            )
            kind = type(error).__name__
            return _failure(TASK_FAILED, f"{kind}: {error}", True, {"type": kind})
        return self._output(result)

    def _output(self, result: Any) -> TaskOutcome:
        try:
            if self.output_model is not None and not isinstance(result, BaseModel):
                result = self.output_model.model_validate(result)
            if isinstance(result, BaseModel):
                return TaskOutcome(output=result.model_dump(mode="json"))
            return TaskOutcome(output=to_jsonable_python(result))
        except (ValidationError, PydanticSerializationError) as error:
            return _failure(
                INVALID_OUTPUT, f"the output of {self.key} is not valid: {error}", False
            )


def task(name: str, version: str = "1") -> Callable[[F], F]:
    """Make an ``async def`` a task that workers can serve.

    Args:
        name: The task name workflows call (``task: NAME``).
        version: The contract version workflows declare for it.

    Raises:
        TypeError: The function is not ``async``, or takes no input.
    """

    def decorate(fn: F) -> F:
        is_async = inspect.iscoroutinefunction(fn)  # kept apart: it would narrow fn's type
        if not is_async:
            raise TypeError(f"@task({name!r}) needs an async def, not {fn!r}")
        parameters = list(inspect.signature(fn).parameters.values())
        if not parameters:
            raise TypeError(f"@task({name!r}): {fn.__name__} must take its input")
        hints = typing.get_type_hints(fn)
        definition = TaskDefinition(
            name=name,
            version=version,
            fn=fn,
            input_model=_model(hints.get(parameters[0].name)),
            output_model=_model(hints.get("return")),
            takes_context=len(parameters) > 1,
        )
        setattr(fn, _ATTRIBUTE, definition)
        return fn

    return decorate


def task_definition(fn: Callable[..., Any] | TaskDefinition) -> TaskDefinition:
    """The definition ``@task`` attached to ``fn``.

    Raises:
        TypeError: ``fn`` is not a task.
    """
    if isinstance(fn, TaskDefinition):
        return fn
    definition = getattr(fn, _ATTRIBUTE, None)
    if not isinstance(definition, TaskDefinition):
        raise TypeError(f"{fn!r} is not a task: decorate it with @task(name, version=...)")
    return definition
