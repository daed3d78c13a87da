"""The AMQP command intake: ``NS.commands`` messages carried out like their HTTP requests.

Each command is handled by :meth:`Executions.handle` and, when it has a
``reply_to``, answered there with a :class:`CommandReply` carrying its
``correlation_id`` (through the default exchange, not persisted). How each
message ends:

- done, or refused with an :class:`OrbitError` (the reply says why): acked;
- a command the decoder cannot read for a value any payload check refuses (a
  lone surrogate, a value nested too deep): refused, ``INVALID_REQUEST``, and
  acked; parked, it would be reported to its execution as a lost message;
- not a command at all: parked in the dead-letter queue, never retried;
- Orbit is unavailable, or an unexpected error: given back, and parked past
  the delivery limit.

A command is carried out at least once: a message redelivered after its
work was committed (the gateway died before the ack) is carried out again.
Starts with an ``execution_id`` are idempotent, and so are signals with a
``request_id`` or an AMQP ``message_id``; a cancel asked twice stops once.
"""

from __future__ import annotations

import asyncio
import json
import logging

from aio_pika.abc import AbstractIncomingMessage

from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.messages import (
    CommandReply,
    ErrorBody,
    MalformedMessage,
    decode_command,
)
from orbit_model.payloads import payload_problem
from orbit_sdk.amqp import Publisher
from orbit_services.gateway.api.executions import Executions
from orbit_services.runtime.broker import give_back, park, reply
from orbit_services.runtime.senders import Senders

log = logging.getLogger("orbit.gateway.commands")

_COMMAND_TYPES = ("StartExecution", "SignalExecution", "CancelExecution")


class CommandIntake:
    """The consumer callback of ``NS.commands``, and a way to wait for the commands in hand."""

    def __init__(
        self, executions: Executions, publisher: Publisher, senders: Senders | None = None
    ) -> None:
        self.executions = executions
        self.publisher = publisher
        self.senders = senders
        self._in_hand: set[asyncio.Task[object]] = set()

    async def on_message(self, message: AbstractIncomingMessage) -> None:
        """Carry out one command message (aio-pika calls this in a task of its own)."""
        task = asyncio.current_task()
        if task is not None:
            self._in_hand.add(task)
        try:
            await self._handle(message)
        finally:
            if task is not None:
                self._in_hand.discard(task)

    async def drain(self, timeout: float) -> None:
        """Wait (up to ``timeout`` seconds) for the commands being carried out to end."""
        current = asyncio.current_task()
        pending = [task for task in self._in_hand if task is not current]
        if pending:
            await asyncio.wait(pending, timeout=timeout)

    async def _handle(self, message: AbstractIncomingMessage) -> None:
        try:
            command = decode_command(message.body)
        except MalformedMessage as error:
            refused = unstorable_command(message.body, self.executions.settings.max_payload_depth)
            # A client waiting for a reply is told, rather than left to its timeout.
            reason = error if refused is None else refused
            refusal = ErrorBody(code=str(reason.code), message=reason.message)
            await self._answer(message, CommandReply(ok=False, error=refusal))
            if refused is None:
                await park(message, error.message)
            else:
                await message.ack()
            return
        if self.senders is not None and self.senders.refused(message, command.type):
            refusal = ErrorBody(
                code=str(ErrorCode.PERMISSION_DENIED),
                message=self.senders.refusal(
                    message,
                    command.type,
                    "commands come from client users: `orbit broker user add --role client`",
                    command.v,
                ),
            )
            await self._answer(message, CommandReply(ok=False, error=refusal))
            await message.ack()
            return
        try:
            result = await self.executions.handle(command, message.message_id)
            answer = CommandReply(ok=True, result=result)
        except OrbitError as error:
            if error.code is ErrorCode.INTERNAL:
                # Not the command's fault: logged, and tried again (parked past the limit).
                log.error(
                    "command %s failed: %s",
                    command.type,
                    error.message,
                    exc_info=error,
                    extra={"action": "command.failed"},
                )
                await give_back(message, error)
                return
            if error.code is ErrorCode.UNAVAILABLE:
                await give_back(message, error)  # may work when tried again
                return
            answer = CommandReply(
                ok=False, error=ErrorBody(code=str(error.code), message=error.message)
            )
        except Exception as error:
            log.exception(
                "command %s failed unexpectedly",
                command.type,
                extra={"action": "command.failed", "command": command.type},
            )
            await give_back(message, error)
            return
        await self._answer(message, answer)
        await message.ack()

    async def _answer(self, message: AbstractIncomingMessage, answer: CommandReply) -> None:
        await reply(self.publisher, message, answer, action="command.reply_failed")


def unstorable_command(body: bytes, max_depth: int) -> OrbitError | None:
    """The refusal of a command the decoder could not read for a value that
    :func:`~orbit_model.payloads.payload_problem` refuses; None: not a command at all."""
    try:
        decoded = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or too deep to read at all
        return None
    if not isinstance(decoded, dict) or decoded.get("type") not in _COMMAND_TYPES:
        return None
    for key, value in decoded.items():
        problem = payload_problem(key) or payload_problem(value, max_depth=max_depth)
        if problem is not None:
            return OrbitError(ErrorCode.INVALID_REQUEST, f"the command's {key!r} {problem}")
    return None
