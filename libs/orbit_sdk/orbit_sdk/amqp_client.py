"""Commands to Orbit over AMQP, for clients that would rather not speak HTTP.

Each command is published, persistent and confirmed, to the ``NS.commands``
exchange with routing key ``command``. With ``wait_reply=True`` it carries
``reply_to`` (direct reply-to) and a correlation id, and the gateway's
:class:`~orbit_model.messages.CommandReply` is returned; without, the call
returns once the broker has the command. Inputs and payloads are JSON data::

    async with AmqpClient() as orbit:
        reply = await orbit.publish_start("order-fulfilment", {"order_id": "o-1"},
                                          execution_id="order-o-1", wait_reply=True)
"""

from __future__ import annotations

import uuid
from types import TracebackType
from typing import Any

from aio_pika.abc import AbstractRobustConnection
from pydantic import ValidationError

from orbit_model.messages import (
    CancelExecution,
    CommandReply,
    MalformedMessage,
    SignalExecution,
    StartExecution,
    encode,
)
from orbit_model.topology import COMMAND_KEY, Topology
from orbit_sdk.amqp import Publisher, connect, open_channel
from orbit_sdk.rpc import Requester
from orbit_sdk.settings import ClientSettings, load_client_settings

Command = StartExecution | SignalExecution | CancelExecution


class AmqpClient:
    """A connection that publishes commands; use it as an async context manager.

    Args:
        settings: The AMQP URL and namespace; default from the environment.
        reply_timeout: Seconds to wait for a reply when one is asked for.
    """

    def __init__(
        self, settings: ClientSettings | None = None, *, reply_timeout: float = 10.0
    ) -> None:
        self.settings = settings or load_client_settings("client")
        self.topology = Topology(self.settings.namespace, self.settings.decider_partitions)
        self.reply_timeout = reply_timeout
        self._connection: AbstractRobustConnection | None = None
        self._publisher: Publisher | None = None
        self._requester: Requester | None = None

    async def connect(self) -> None:
        """Open the connection (done by ``async with``)."""
        connection = await connect(self.settings.amqp_url)
        self._connection = connection
        channel = await open_channel(connection)
        self._publisher = Publisher(channel)
        self._requester = Requester(channel)
        await self._requester.start()

    async def close(self) -> None:
        if self._connection is not None:
            await self._connection.close()
            self._connection = None

    async def __aenter__(self) -> AmqpClient:
        await self.connect()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def send(self, command: Command, wait_reply: bool = False) -> CommandReply | None:
        """Publish any command; its reply when ``wait_reply``.

        Raises:
            OrbitError: ``UNAVAILABLE`` when no reply came in time, or the
                commands exchange does not exist.
            MalformedMessage: The reply is not a ``CommandReply``.
        """
        if self._publisher is None or self._requester is None:
            raise RuntimeError("AmqpClient is not connected: use `async with AmqpClient()`")
        exchange, body = self.topology.commands, encode(command)
        if not wait_reply:
            await self._publisher.publish(exchange, COMMAND_KEY, body)
            return None
        answer = await self._requester.request(exchange, COMMAND_KEY, body, self.reply_timeout)
        try:
            return CommandReply.model_validate_json(answer)
        except ValidationError as error:
            raise MalformedMessage("command reply", error) from None

    async def publish_start(
        self,
        workflow: str,
        input: Any = None,
        version: str | None = None,
        execution_id: str | None = None,
        *,
        wait_reply: bool = False,
    ) -> CommandReply | None:
        """Start an execution; idempotent when ``execution_id`` is given.

        The reply's ``result`` is ``{execution_id, created}``.
        """
        command = StartExecution(
            workflow=workflow, version=version, input=input, execution_id=execution_id
        )
        return await self.send(command, wait_reply)

    async def publish_signal(
        self,
        execution_id: str,
        name: str,
        payload: Any = None,
        *,
        request_id: str | None = None,
        wait_reply: bool = False,
    ) -> CommandReply | None:
        """Signal an execution; the reply's ``result`` is ``{seq, taken, steps}``, as
        the HTTP API answers (which ``await`` step takes it).

        The signal is recorded once however often it is delivered: it carries
        ``request_id``, or a fresh one. Pass the same ``request_id`` to send it
        again safely (the reply names the first one's seq).
        """
        command = SignalExecution(
            execution_id=execution_id,
            name=name,
            payload=payload,
            request_id=request_id or uuid.uuid4().hex,
        )
        return await self.send(command, wait_reply)

    async def publish_cancel(
        self, execution_id: str, reason: str = "", *, wait_reply: bool = False
    ) -> CommandReply | None:
        """Ask an execution to stop (compensation and cleanup still run)."""
        return await self.send(
            CancelExecution(execution_id=execution_id, reason=reason), wait_reply
        )


async def publish_start(
    workflow: str,
    input: Any = None,
    version: str | None = None,
    execution_id: str | None = None,
    *,
    settings: ClientSettings | None = None,
    wait_reply: bool = False,
) -> CommandReply | None:
    """:meth:`AmqpClient.publish_start` on a connection of its own (one-off use)."""
    async with AmqpClient(settings) as client:
        return await client.publish_start(
            workflow, input, version, execution_id, wait_reply=wait_reply
        )


async def publish_signal(
    execution_id: str,
    name: str,
    payload: Any = None,
    *,
    settings: ClientSettings | None = None,
    request_id: str | None = None,
    wait_reply: bool = False,
) -> CommandReply | None:
    """:meth:`AmqpClient.publish_signal` on a connection of its own (one-off use)."""
    async with AmqpClient(settings) as client:
        return await client.publish_signal(
            execution_id, name, payload, request_id=request_id, wait_reply=wait_reply
        )


async def publish_cancel(
    execution_id: str,
    reason: str = "",
    *,
    settings: ClientSettings | None = None,
    wait_reply: bool = False,
) -> CommandReply | None:
    """:meth:`AmqpClient.publish_cancel` on a connection of its own (one-off use)."""
    async with AmqpClient(settings) as client:
        return await client.publish_cancel(execution_id, reason, wait_reply=wait_reply)
