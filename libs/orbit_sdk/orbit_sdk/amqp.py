"""The AMQP connection and publisher every Orbit process uses: workers, clients and services.

Messages are persistent and published with confirms on a channel that raises
on returns, so an unroutable message is an error, not a silent loss. The
connection is aio-pika's robust one: it reconnects by itself, and consumers
of queues declared through its channels are consumed again afterwards.

A process that counts what it does (the server's metrics) adds callbacks to
:data:`COUNTERS`, which every connection and publisher of the process calls;
the SDK itself counts nothing, so a worker needs no metrics library.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractRobustConnection
from aio_pika.exceptions import CONNECTION_EXCEPTIONS
from pamqp.commands import Basic
from yarl import URL

from orbit_model.errors import ErrorCode, OrbitError, unreachable
from orbit_sdk.amqp_nodes import split_nodes

Callback = Callable[[], None]


@dataclass
class Counters:
    """What this process's connections and publishers report, to whoever counts it."""

    published: list[Callback] = field(default_factory=list)
    """Called once per confirmed publish."""
    lost: list[Callback] = field(default_factory=list)
    """Called when a working connection drops without being closed by us (once per
    outage: a reconnect attempt that fails while restoring its channels is not
    another loss)."""
    reconnected: list[Callback] = field(default_factory=list)
    """Called when a lost connection is back."""


COUNTERS = Counters()
"""The process's counters: empty in a worker; the server's metrics add theirs
(``orbit_services.runtime.broker``), so a worker run inside a service process
is counted with it."""


@contextlib.contextmanager
def translated(what: str) -> Iterator[None]:
    """Turn what the AMQP client raises inside into ``UNAVAILABLE``, saying what failed.

    The one place, with :class:`Publisher`, where aio-pika's and aiormq's errors
    become Orbit's: the services and the SDK see OrbitErrors only.
    """
    try:
        yield
    except aiormq.exceptions.ChannelNotFoundEntity as error:
        raise OrbitError(
            ErrorCode.UNAVAILABLE,
            f"{what}: it does not exist on the broker (has Orbit ever run in this namespace?)",
        ) from error
    except (
        aiormq.exceptions.AMQPError,
        aiormq.exceptions.ChannelInvalidStateError,
        ConnectionError,
    ) as error:
        raise OrbitError(ErrorCode.UNAVAILABLE, f"{what} failed: {error!r}") from error


def _report(callbacks: list[Callback]) -> None:
    for callback in callbacks:
        callback()


CONNECT_TIMEOUT_SECONDS = 10.0
"""How long one node may take to answer a connection (TCP, TLS and the AMQP handshake)
before the next one is tried: a node whose host is gone never refuses, it is silent."""


class NodesConnection(aio_pika.RobustConnection):
    """aio-pika's robust connection over the nodes of a cluster.

    aio-pika reconnects by calling its private ``__connect_transport`` (once
    per attempt, then it waits ``reconnect_interval``), which opens
    ``self.url`` and restores every robust channel, with its queues and
    consumers. This class overrides that one method, by its mangled name:
    each attempt tries every node once, starting after the one it had, so a
    node that went away is replaced at once by another, and the wait comes
    only after every node failed. ``tests/unit/test_amqp_nodes.py`` fails if
    aio-pika renames the method.
    """

    def __init__(self, nodes: list[URL], start: int = 0, **kwargs: Any) -> None:
        super().__init__(nodes[start], **kwargs)
        self.nodes = nodes
        self._next = start
        self.up = False
        """Connected with every channel restored; a loss is counted only from here."""

    async def _RobustConnection__connect_transport(self) -> None:
        last: BaseException | None = None
        for _ in self.nodes:
            self.url = self.nodes[self._next]
            self._next = (self._next + 1) % len(self.nodes)
            try:
                await _CONNECT_TRANSPORT(self)
            except CONNECTION_EXCEPTIONS as error:
                last = error
                continue
            return
        assert last is not None
        raise last


_CONNECT_TRANSPORT = aio_pika.RobustConnection._RobustConnection__connect_transport  # type: ignore[attr-defined]


def heartbeat_in_url(url: str) -> bool:
    """Whether ``url`` (any of its nodes) sets the AMQP heartbeat itself (``?heartbeat=``)."""
    try:
        return any("heartbeat" in URL(node).query for node in split_nodes(url))
    except ValueError:
        return False


async def connect(url: str, heartbeat_seconds: int | None = None) -> AbstractRobustConnection:
    """A connection that reconnects by itself; ``UNAVAILABLE`` if no node is there.

    ``url`` names one RabbitMQ node or several (:func:`~orbit_sdk.amqp_nodes.split_nodes`):
    the connection starts at one picked at random, so a cluster's clients spread
    over its nodes, and moves on to the next when its node goes away.
    ``heartbeat_seconds`` asks for AMQP heartbeats that often (unless the URL
    sets its own): a process that freezes then loses its connection, and the
    broker hands its unacked messages to others, within about twice that.

    Raises:
        OrbitError: ``UNAVAILABLE``, naming the nodes (without their passwords).
    """
    try:
        nodes = [URL(node) for node in split_nodes(url)]
    except ValueError as error:
        raise OrbitError(ErrorCode.INVALID_SETTINGS, f"ORBIT_AMQP_URL: {error}") from None
    if heartbeat_seconds is not None:
        nodes = [
            node
            if "heartbeat" in node.query
            else node.update_query(heartbeat=str(heartbeat_seconds))
            for node in nodes
        ]
    connection = NodesConnection(
        nodes, random.randrange(len(nodes)), client_properties={"connection_name": "orbit"}
    )
    try:
        await connection.connect(timeout=CONNECT_TIMEOUT_SECONDS)
    except (OSError, aio_pika.exceptions.AMQPError) as error:
        raise unreachable("RabbitMQ", url, error) from error
    connection.up = True
    connection.close_callbacks.add(_on_closed)
    connection.reconnect_callbacks.add(_on_reconnected)
    return connection


def is_up(connection: AbstractRobustConnection) -> bool:
    """Whether ``connection`` (made by :func:`connect`) is connected now: not closed, and
    not lost since it last connected (a lost one keeps reconnecting). A silent link is
    noticed once the AMQP heartbeats stop: within about twice ``heartbeat_seconds``."""
    return not connection.is_closed and bool(getattr(connection, "up", True))


def _on_closed(connection: Any, _error: BaseException | None = None) -> None:
    # Called on our own close() too: only a close nobody asked for is a loss. aio-pika
    # also calls it when a reconnect attempt connects but fails to restore a channel
    # (a quorum queue still electing its leader): the outage goes on, it is not a new one.
    if not connection._close_called and not connection.is_closed and connection.up:
        connection.up = False
        _report(COUNTERS.lost)


def _on_reconnected(connection: Any) -> None:
    connection.up = True
    _report(COUNTERS.reconnected)


_LOGINS: weakref.WeakKeyDictionary[AbstractChannel, str] = weakref.WeakKeyDictionary()
"""The user each channel of :func:`open_channel` is logged in as: its publishes say so."""


async def open_channel(
    connection: AbstractRobustConnection, prefetch: int | None = None
) -> AbstractChannel:
    """A channel with publisher confirms that raises on returned (unroutable) messages."""
    with translated("opening a channel to RabbitMQ"):
        channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        if prefetch is not None:
            await channel.set_qos(prefetch_count=prefetch)
    user = getattr(connection, "url", URL()).user
    if user:
        _LOGINS[channel] = user
    return channel


class Outgoing(Protocol):
    """A message to publish (the server's ``OutboxMessage`` is one)."""

    @property
    def exchange(self) -> str: ...
    @property
    def routing_key(self) -> str: ...
    @property
    def body(self) -> bytes: ...
    @property
    def headers(self) -> Mapping[str, str] | None: ...


_RENEWALS: set[asyncio.Task[None]] = set()
"""Channel renewals under way (held so that they are not collected half done)."""


class Publisher:
    """Persistent, confirmed publishes; many at once are pipelined, not awaited one by one.

    It hands each publish to the channel's aiormq channel with the AMQP
    properties built directly: aio-pika's ``Message`` and ``Exchange`` layer
    added a third to the client's CPU per message. The guarantees are the
    same: a confirm is awaited, and a nack or an unroutable mandatory message
    (the channel is opened with ``on_return_raises``) is an error. Every
    failure is an ``UNAVAILABLE`` :class:`~orbit_model.errors.OrbitError`
    (the driver's error is its cause), saying what the broker refused.

    Every message carries the AMQP ``user_id`` of the channel's login:
    RabbitMQ refuses one whose ``user_id`` is not the connection's user, so a
    consumer knows who sent it (docs/security.md, the broker's roles).

    Args:
        channel: A channel of :func:`open_channel`.
    """

    RENEW_INTERVAL_SECONDS = 5.0
    """The least time between two renewals of the channel after refusals."""

    def __init__(self, channel: AbstractChannel) -> None:
        self.channel = channel
        self.user_id = _LOGINS.get(channel)
        self.renewals = 0
        """How often a refusal had the channel replaced (for tests and diagnostics)."""
        self._renewed_at = -self.RENEW_INTERVAL_SECONDS

    def _renew_after_refusal(self) -> None:
        """Replace the channel after RabbitMQ refused (nacked) a publish on it.

        A channel keeps, per quorum queue, the state of its publishing to it, and
        RabbitMQ can leave that state refusing every publish after the queue's leader
        node went away, while a new channel on the same connection publishes at once
        (a cluster test saw one decider refused for the rest of its run while every
        other process published). Closing the channel's broker side has the robust
        channel open a new one, with what was declared through it; publishes in flight
        fail as UNAVAILABLE, as they would have. At most once per
        :attr:`RENEW_INTERVAL_SECONDS`, so that a queue that truly refuses (a
        ``reject-publish`` overflow) does not churn channels.
        """
        now = asyncio.get_running_loop().time()
        if now - self._renewed_at < self.RENEW_INTERVAL_SECONDS:
            return
        self._renewed_at = now
        self.renewals += 1
        task = asyncio.get_running_loop().create_task(self._close_broker_side())
        _RENEWALS.add(task)
        task.add_done_callback(_RENEWALS.discard)

    async def _close_broker_side(self) -> None:
        with contextlib.suppress(Exception):
            underlay = await self.channel.get_underlay_channel()
            await underlay.close()

    async def publish(
        self,
        exchange: str,
        routing_key: str,
        body: bytes,
        *,
        correlation_id: str | None = None,
        reply_to: str | None = None,
        persistent: bool = True,
        headers: dict[str, Any] | None = None,
    ) -> None:
        properties = Basic.Properties(
            content_type="application/json",
            delivery_mode=2 if persistent else 1,
            correlation_id=correlation_id,
            reply_to=reply_to,
            headers=headers,
            user_id=self.user_id,
        )
        if self.channel.is_closed:
            raise OrbitError(ErrorCode.UNAVAILABLE, "the channel to RabbitMQ is closed")
        try:
            channel = await self.channel.get_underlay_channel()
            await channel.basic_publish(
                body,
                exchange=exchange,
                routing_key=routing_key,
                properties=properties,
                # The default exchange (direct replies) routes by queue name: no return.
                mandatory=exchange != "",
            )
        except aiormq.exceptions.ChannelNotFoundEntity as error:
            raise OrbitError(
                ErrorCode.UNAVAILABLE,
                f"exchange {exchange!r} does not exist: has Orbit ever run in this namespace?",
            ) from error
        except aiormq.exceptions.PublishError as error:  # a basic.return: unroutable
            raise OrbitError(
                ErrorCode.UNAVAILABLE,
                f"RabbitMQ did not take a message for {exchange!r} with key {routing_key!r}"
                " (nothing is bound to it)",
            ) from error
        except aiormq.exceptions.DeliveryError as error:  # a basic.nack
            self._renew_after_refusal()
            raise OrbitError(
                ErrorCode.UNAVAILABLE,
                f"RabbitMQ refused a message for {exchange!r} with key {routing_key!r}"
                " (a queue it routes to could not take it)",
            ) from error
        except (aiormq.exceptions.AMQPError, aiormq.exceptions.ChannelInvalidStateError) as error:
            raise OrbitError(
                ErrorCode.UNAVAILABLE, f"publishing to RabbitMQ failed: {error!r}"
            ) from error
        _report(COUNTERS.published)

    async def publish_many(self, messages: Iterable[Outgoing]) -> None:
        """Publish all, confirmed; raises the first failure after every publish has ended."""
        results = await asyncio.gather(
            *(
                self.publish(
                    message.exchange,
                    message.routing_key,
                    message.body,
                    headers=dict(message.headers) if message.headers else None,
                )
                for message in messages
            ),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result


async def settle(
    outcome: Awaitable[object],
    log: logging.Logger,
    *,
    action: str = "message.unsettled",
    level: int = logging.WARNING,
) -> None:
    """Await an ack, nack or reject of a delivery; if it fails, say so on ``log`` (at
    ``level``, with ``action``) and return. One whose channel is gone (the connection was
    lost, which is logged as such) cannot be settled, and needs not: the broker gives it
    back by itself."""
    try:
        await outcome
    except Exception as error:
        log.log(
            level,
            "settling a message failed (the broker redelivers it): %r",
            error,
            extra={"action": action},
        )
