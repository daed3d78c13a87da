"""A service whose start fails halfway releases what it acquired before it raises.

A service acquires its resources one step after another (a Postgres pool, the
RabbitMQ connection, a LISTEN connection, background tasks, the metrics and
HTTP ports; ``orbit_services.runtime.host``). Whichever step fails, the start
raises that step's error and nothing is left behind it: no connection to the
installation's database, no open AMQP connection, no task of the service still
running, no port still bound (a process that retries its start would otherwise
pile up pools). A release that fails is logged, and the others still run.
Stopping after a failed start changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import pkgutil
import socket
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest

from orbit_model.errors import ErrorCode, OrbitError
from orbit_sdk.amqp import NodesConnection
from orbit_sdk.lifecycle import Service
from orbit_services.runner import SERVICES, build
from orbit_services.runtime.settings import Settings
from tests.integration.conftest import OrbitEnv, with_database
from tests.integration.eventually import eventually

NO_BROKER = "amqp://guest:guest@127.0.0.1:1/"
"""Nothing listens on port 1: a connection there is refused at once."""

STEPS: dict[str, tuple[str, ...]] = {
    "gateway": (
        "orbit_services.gateway.service.connect",
        "orbit_services.gateway.service.declare_topology",
        "orbit_services.gateway.api.executions.Executions.listen_for_endings",
        "orbit_services.gateway.service._serve",
        "orbit_services.gateway.service._say_how_requests_are_authenticated",
        "orbit_services.gateway.service.consume",
    ),
    "decider": (
        "orbit_services.decider.service.connect",
        "orbit_services.decider.service.declare_topology",
        "orbit_services.runtime.clock.PostgresClock.sync",
        "orbit_services.store.leases.LeaseStore.open",
        "orbit_services.decider.partitions.PartitionLeases.start",
        "orbit_services.runtime.metrics.MetricsEndpoint.start",
    ),
    "dispatcher": (
        "orbit_services.dispatcher.service.connect",
        "orbit_services.dispatcher.service.declare_topology",
        "orbit_services.dispatcher.service.consume",
        "orbit_services.runtime.metrics.MetricsEndpoint.start",
    ),
    "timer": (
        "orbit_services.store.timers.TimerStore.listen",
        "orbit_services.timer.service.connect",
        "orbit_services.timer.service.declare_topology",
        "orbit_services.runtime.clock.PostgresClock.sync",
        "orbit_services.runtime.metrics.MetricsEndpoint.start",
    ),
    "http-adapter": (
        "orbit_services.runtime.metrics.MetricsEndpoint.start",
        "orbit_services.http_adapter.adapter.HttpAdapter.open",
        "orbit_sdk.worker.Worker.start",
    ),
}
"""What each service calls at each step of its start after the first (the Postgres
pool, whose failure leaves nothing to release), in order."""

LAST_STEP = {name: steps[-1] for name, steps in STEPS.items()}


class Injected(OrbitError):
    """The failure a test puts in a step."""

    def __init__(self) -> None:
        super().__init__(ErrorCode.UNAVAILABLE, "a step made to fail")


def _fail_at(monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    """Make ``target`` (a dotted name: a function, or a class's method) raise ``Injected``."""
    if inspect.iscoroutinefunction(pkgutil.resolve_name(target)):

        async def fail_async(*_: object, **__: object) -> Any:
            raise Injected

        monkeypatch.setattr(target, fail_async)
    else:

        def fail(*_: object, **__: object) -> Any:
            raise Injected

        monkeypatch.setattr(target, fail)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


async def _connections_to(database_url: str) -> int:
    """Connections to the test's database other than this one (the services' pools)."""
    name = urlsplit(database_url).path.lstrip("/")
    admin = await asyncpg.connect(with_database(database_url, "postgres"))
    try:
        return int(
            await admin.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname = $1", name)
        )
    finally:
        await admin.close()


def _settings(orbit_env: OrbitEnv, **changes: object) -> Settings:
    return orbit_env.settings_with(
        metrics_port=_free_port(),
        http_host="127.0.0.1",
        http_port=_free_port(),
        http_adapter_enabled=True,
        **changes,
    )


@pytest.fixture
def amqp_connections(monkeypatch: pytest.MonkeyPatch) -> list[NodesConnection]:
    """Every AMQP connection made during the test (the services' and a worker's)."""
    opened: list[NodesConnection] = []
    connect = NodesConnection.connect

    async def recorded(self: NodesConnection, *args: Any, **kwargs: Any) -> None:
        await connect(self, *args, **kwargs)
        opened.append(self)

    monkeypatch.setattr(NodesConnection, "connect", recorded)
    return opened


@contextlib.asynccontextmanager
async def _nothing_left(
    settings: Settings, connections: list[NodesConnection], service: Service
) -> AsyncIterator[None]:
    """Check, after the block, that ``service`` left nothing open that it opened in it."""
    before = asyncio.all_tasks()
    yield
    # A closed pool's connections end at once; Postgres forgets them a moment later.
    await eventually(
        lambda: _connections_to(settings.database_url),
        lambda count: count == 0,
        timeout=30,
        interval=0.1,
        what=f"the {service.name}'s Postgres connections closing",
    )
    assert [connection for connection in connections if not connection.is_closed] == []
    assert [task for task in asyncio.all_tasks() - before if not task.done()] == []
    for port in (settings.metrics_port, settings.http_port):
        assert port is not None
        assert not await asyncio.to_thread(_listening, port), f"port {port} is still bound"
    await service.stop()  # harmless after a failed start (a runner may do it anyway)


@pytest.mark.parametrize("name", sorted(SERVICES))
async def test_a_start_without_rabbitmq_leaves_nothing_open(
    orbit_env: OrbitEnv, amqp_connections: list[NodesConnection], name: str
) -> None:
    settings = _settings(orbit_env, amqp_url=NO_BROKER)
    (service,) = build([name], settings)
    async with _nothing_left(settings, amqp_connections, service):
        with pytest.raises(OrbitError) as refused:
            await service.start()
    assert refused.value.code == ErrorCode.UNAVAILABLE, refused.value


@pytest.mark.parametrize(
    ("name", "target"),
    [(name, target) for name, targets in STEPS.items() for target in targets],
    ids=lambda value: value.rsplit(".", 2)[-1] if "." in value else value,
)
async def test_a_start_failing_at_any_step_releases_what_it_acquired(
    orbit_env: OrbitEnv,
    amqp_connections: list[NodesConnection],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    target: str,
) -> None:
    settings = _settings(orbit_env)
    (service,) = build([name], settings)
    _fail_at(monkeypatch, target)
    async with _nothing_left(settings, amqp_connections, service):
        with pytest.raises(Injected):
            await service.start()


@pytest.mark.parametrize("name", ["gateway", "decider", "dispatcher", "timer"])
async def test_a_release_that_fails_keeps_nothing_else_open(
    orbit_env: OrbitEnv,
    amqp_connections: list[NodesConnection],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
) -> None:
    """The RabbitMQ connection closes, then raises: the Postgres pool is closed still."""
    close = NodesConnection.close

    async def close_and_fail(self: NodesConnection, *args: Any, **kwargs: Any) -> None:
        await close(self, *args, **kwargs)
        raise ConnectionError("closing failed")

    monkeypatch.setattr(NodesConnection, "close", close_and_fail)
    settings = _settings(orbit_env)
    (service,) = build([name], settings)
    _fail_at(monkeypatch, LAST_STEP[name])
    async with _nothing_left(settings, amqp_connections, service):
        with pytest.raises(Injected):
            await service.start()
