"""Request and reply over RabbitMQ's direct reply-to.

The requester consumes the pseudo-queue ``amq.rabbitmq.reply-to`` (no acks)
on a channel and publishes its requests on that same channel with
``reply_to="amq.rabbitmq.reply-to"`` and a fresh ``correlation_id``; the
broker routes the answer straight back to this channel, with no queue to
declare or delete. Used by workers (control) and AMQP clients (commands).
"""

from __future__ import annotations

import asyncio
import uuid

from aio_pika.abc import AbstractChannel, AbstractIncomingMessage

from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.topology import REPLY_TO
from orbit_sdk.amqp import Publisher, translated


class ReplyTimeout(OrbitError):
    """No answer came within the time allowed."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.UNAVAILABLE, message)


class Requester:
    """Sends requests on one channel and matches answers by correlation id.

    Call :meth:`start` once before the first request.
    """

    def __init__(self, channel: AbstractChannel) -> None:
        self._channel = channel
        self._publisher = Publisher(channel)
        self._waiting: dict[str, asyncio.Future[bytes]] = {}

    async def start(self) -> None:
        # Passive declare (not get_queue(ensure=False)): a robust channel then
        # consumes it again after a reconnect.
        with translated("consuming direct replies"):
            queue = await self._channel.declare_queue(REPLY_TO, passive=True)
            await queue.consume(self._on_reply, no_ack=True)

    async def _on_reply(self, message: AbstractIncomingMessage) -> None:
        future = self._waiting.pop(message.correlation_id or "", None)
        if future is not None and not future.done():
            future.set_result(message.body)

    async def request(self, exchange: str, routing_key: str, body: bytes, timeout: float) -> bytes:
        """Publish ``body`` and return the body of its answer.

        Raises:
            ReplyTimeout: No answer within ``timeout`` seconds.
            OrbitError: ``UNAVAILABLE`` when the exchange does not exist or the
                request cannot be routed (nobody declared the queue).
        """
        correlation_id = uuid.uuid4().hex
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._waiting[correlation_id] = future
        try:
            # A missing exchange, or nothing bound to it, is UNAVAILABLE already.
            await self._publisher.publish(
                exchange,
                routing_key,
                body,
                correlation_id=correlation_id,
                reply_to=REPLY_TO,
                persistent=False,
            )
            try:
                async with asyncio.timeout(timeout):
                    return await future
            except TimeoutError:
                raise ReplyTimeout(f"no answer on {exchange!r} within {timeout:g}s") from None
        finally:
            self._waiting.pop(correlation_id, None)
