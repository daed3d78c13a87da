"""The gateway service: the HTTP API and the AMQP command intake over one store and broker."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

import uvicorn
from aio_pika.abc import AbstractQueue, AbstractRobustConnection

from orbit_model.broker_roles import Role
from orbit_model.errors import ErrorCode, OrbitError
from orbit_sdk.amqp import Publisher, connect, open_channel
from orbit_services.gateway.app import create_app
from orbit_services.gateway.auth import AUTH_DISABLED_WARNING
from orbit_services.gateway.commands import CommandIntake
from orbit_services.gateway.executions import Executions
from orbit_services.runtime.broker import consume, declare_topology
from orbit_services.runtime.senders import Senders, check_identity
from orbit_services.runtime.settings import Settings
from orbit_services.store import EventStore
from orbit_services.store.outbox import OutboxRelay

log = logging.getLogger("orbit.gateway")

COMMAND_PREFETCH = 64
"""Commands carried out at once."""
DRAIN_SECONDS = 10.0
"""How long ``stop()`` waits for commands and requests in hand."""


class _EmbeddedServer(uvicorn.Server):
    """uvicorn inside a loop it does not own: signals belong to the service lifecycle."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _serve(server: uvicorn.Server) -> None:
    try:
        await server.serve()
    except SystemExit:
        # uvicorn exits the process when it cannot listen; here that is an error to raise.
        config = server.config
        raise OrbitError(
            ErrorCode.UNAVAILABLE, f"the gateway cannot listen on {config.host}:{config.port}"
        ) from None


async def broker_ready(connection: AbstractRobustConnection) -> None:
    """Returns when RabbitMQ answers on ``connection`` (a channel opens and closes)."""
    if connection.is_closed:
        raise ConnectionError("the connection to RabbitMQ is closed")
    channel = await connection.channel()
    await channel.close()


async def _say_how_requests_are_authenticated(settings: Settings, store: EventStore) -> None:
    """Warn at every start when nothing guards the API, or when no token could pass it."""
    if settings.auth == "disabled":
        log.warning(AUTH_DISABLED_WARNING, extra={"action": "gateway.auth_disabled"})
        return
    if await store.tokens.usable() == 0:
        log.warning(
            "no API token exists yet, so every request will be refused with 401;"
            " make one with: orbit token create --name admin --scope admin",
            extra={"action": "gateway.no_tokens"},
        )


class GatewayService:
    """``orbit-gateway``: serves ``/v1`` on ``http_host:http_port`` and consumes ``NS.commands``."""

    name = "gateway"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topology = settings.topology
        self._store: EventStore | None = None
        self._connection: AbstractRobustConnection | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._executions: Executions | None = None
        self._server: uvicorn.Server | None = None
        self._serving: asyncio.Task[None] | None = None
        self._intake: CommandIntake | None = None
        self._consumer: tuple[AbstractQueue, str] | None = None

    @property
    def port(self) -> int:
        """The port the HTTP API listens on (once started)."""
        if self._server is None or not self._server.started:
            raise RuntimeError("the gateway is not serving")
        return int(self._server.servers[0].sockets[0].getsockname()[1])

    async def start(self) -> None:
        """Connect, declare the topology, serve HTTP, then take commands; return once serving.

        Raises:
            OrbitError: ``UNAVAILABLE`` when Postgres or RabbitMQ cannot be
                reached, or the HTTP port cannot be bound (nothing is left open).
        """
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        settings = self.settings
        check_identity(settings, Role.GATEWAY)
        self._store = store = await EventStore.connect(settings.database_url)
        self._connection = connection = await connect(settings.amqp_url)
        publishing = await open_channel(connection)
        await declare_topology(publishing, self.topology)
        publisher = Publisher(publishing)
        relay = OutboxRelay(store.outbox, publisher, service=self.name)
        self._executions = executions = Executions(store, relay, self.topology, settings)
        await executions.listen_for_endings()
        self._sweeper = asyncio.create_task(relay.run_sweeper(), name="gateway.outbox")

        async def rabbitmq() -> None:
            await broker_ready(connection)

        app = create_app(executions, {"postgres": store.ping, "rabbitmq": rabbitmq})
        config = uvicorn.Config(
            app,
            host=settings.http_host,
            port=settings.http_port,
            log_config=None,
            lifespan="off",
            http="httptools",  # a dependency: C parsing, not h11's pure Python
            timeout_graceful_shutdown=int(DRAIN_SECONDS),
        )
        self._server = server = _EmbeddedServer(config)
        self._serving = serving = asyncio.create_task(_serve(server), name="gateway.http")
        while not server.started:
            if serving.done():
                serving.result()  # raises why it stopped
                raise OrbitError(ErrorCode.UNAVAILABLE, "the HTTP server stopped at start")
            await asyncio.sleep(0.01)
        log.info(
            "gateway listening on http://%s:%d",
            settings.http_host,
            self.port,
            extra={"action": "gateway.listening", "port": self.port},
        )
        await _say_how_requests_are_authenticated(settings, store)
        consuming = await open_channel(connection, prefetch=COMMAND_PREFETCH)
        self._intake = CommandIntake(executions, publisher, Senders(settings, "gateway"))
        self._consumer = await consume(consuming, self.topology.commands, self._intake.on_message)

    async def stop(self) -> None:
        """Stop taking commands and requests, finish those in hand, close every connection."""
        if self._consumer is not None:
            queue, tag = self._consumer
            self._consumer = None
            with contextlib.suppress(Exception):
                await queue.cancel(tag)
        if self._intake is not None:
            await self._intake.drain(DRAIN_SECONDS)
        if self._server is not None and self._serving is not None:
            self._server.should_exit = True
            with contextlib.suppress(Exception):
                await self._serving
        self._serving = None
        if self._executions is not None:
            await self._executions.close()  # appends in hand are written
            self._executions = None
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        if self._connection is not None:
            await self._connection.close()
            self._connection = None
        if self._store is not None:
            await self._store.close()
            self._store = None
