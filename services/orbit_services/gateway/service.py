"""The gateway service: the HTTP API and the AMQP command intake over one store and broker."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

import uvicorn
from aio_pika.abc import AbstractQueue, AbstractRobustConnection, ConsumerTag
from fastapi import FastAPI

from orbit_model.broker_roles import Role
from orbit_model.errors import ErrorCode, OrbitError
from orbit_sdk.amqp import Publisher, connect, open_channel
from orbit_sdk.cli.hints import orbit_command
from orbit_services.gateway.api.commands import CommandIntake
from orbit_services.gateway.api.executions import Executions
from orbit_services.gateway.app import create_app
from orbit_services.gateway.edge.auth import AUTH_DISABLED_WARNING
from orbit_services.runtime import http_server
from orbit_services.runtime.broker import consume, declare_topology
from orbit_services.runtime.host import Host
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
            ErrorCode.UNAVAILABLE,
            f"the gateway cannot listen on {config.host}:{config.port} (taken by another"
            " process?); ORBIT_HTTP_PORT and ORBIT_HTTP_HOST say where it listens",
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
            " make one with: %s token create --name admin --scope admin",
            orbit_command(),
            extra={"action": "gateway.no_tokens"},
        )


class GatewayService:
    """``orbit-gateway``: serves ``/v1`` on ``http_host:http_port`` and consumes ``NS.commands``."""

    name = "gateway"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topology = settings.topology
        self._host = Host(self.name)
        self._server: uvicorn.Server | None = None

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
        await self._host.start(self._start)

    async def _start(self, host: Host) -> None:
        settings = self.settings
        check_identity(settings, Role.GATEWAY)
        store = await host.acquire(
            "postgres",
            EventStore.connect(
                settings.database_url, timeout=settings.postgres_request_timeout_seconds
            ),
            lambda store: store.close,
        )
        connection = await host.acquire(
            "rabbitmq", connect(settings.amqp_url), lambda connection: connection.close
        )
        publishing = await open_channel(connection)
        await declare_topology(publishing, self.topology)
        publisher = Publisher(publishing)
        relay = OutboxRelay(
            store.outbox,
            publisher,
            service=self.name,
            publish_timeout=settings.broker_request_timeout_seconds,
        )
        executions = Executions(store, relay, self.topology, settings)
        await executions.listen_for_endings()  # store.close() stops it, should this fail
        host.run(relay.run_sweeper(), "gateway.outbox")
        host.on_stop("executions", executions.close)  # appends in hand are written

        async def rabbitmq() -> None:
            await broker_ready(connection)

        app = create_app(executions, {"postgres": store.ping, "rabbitmq": rabbitmq})
        await self._serve_http(host, app)
        await _say_how_requests_are_authenticated(settings, store)
        consuming = await open_channel(connection, prefetch=COMMAND_PREFETCH)
        intake = CommandIntake(executions, publisher, Senders(settings, "gateway"))
        host.on_stop("commands in hand", lambda: intake.drain(DRAIN_SECONDS))
        queue, tag = await consume(consuming, self.topology.commands, intake.on_message)
        host.on_stop("the command consumer", lambda: _cancel_consumer(queue, tag))

    async def _serve_http(self, host: Host, app: FastAPI) -> None:
        """Serve ``app`` on ``http_host:http_port``; return once listening.

        Raises:
            OrbitError: ``UNAVAILABLE`` when the port cannot be bound.
        """
        settings = self.settings
        http_server.ensure_open_files(settings.http_max_connections)
        config = uvicorn.Config(
            app,
            host=settings.http_host,
            port=settings.http_port,
            log_config=None,
            lifespan="off",
            # httptools (C parsing, not h11's pure Python), held to the ORBIT_HTTP_* limits
            http=http_server.bounded_protocol(http_server.HttpLimits.of(settings)),
            ws="none",
            backlog=http_server.ACCEPT_BURST,
            timeout_graceful_shutdown=int(DRAIN_SECONDS),
        )
        self._server = server = _EmbeddedServer(config)
        serving = asyncio.create_task(_serve(server), name="gateway.http")
        host.on_stop("the HTTP server", lambda: _shut_down(server, serving))
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

    async def stop(self) -> None:
        """Stop taking commands and requests, finish those in hand, close every connection."""
        await self._host.stop()


async def _shut_down(server: uvicorn.Server, serving: asyncio.Task[None]) -> None:
    """Let uvicorn finish the requests in hand (up to its graceful timeout) and close."""
    server.should_exit = True
    with contextlib.suppress(Exception):
        await serving


async def _cancel_consumer(queue: AbstractQueue, tag: ConsumerTag) -> None:
    with contextlib.suppress(Exception):  # the channel may be gone already
        await queue.cancel(tag)
