"""Fixtures of the integration tests: each test gets its own database and broker namespace.

A template database is migrated once per run (under an advisory lock, as the
xdist workers start together) and cloned for each test, which is much faster
than migrating each time. The namespace prefixes every exchange and queue the
test's services declare; both are removed when the test ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aio_pika
import asyncpg
import pytest

from orbit_model.topology import Topology
from orbit_services.commands.broker_setup import BrokerAdmin, remove_namespace
from orbit_services.runtime import broker
from orbit_services.runtime.settings import Settings, load_settings
from orbit_services.store.migrate import migrate, migrations

from .services import ServiceUrls, service_urls

_TEMPLATE_LOCK = 0x0B17_7E57

# Every queue the services in this process declare, so that each test can delete
# its namespace's queues, task queues included, even those no session names.
_DECLARED: set[str] = set()
_declare_queue = broker.declare_queue


async def _recording_declare_queue(*args: Any, **kwargs: Any) -> Any:
    queue = await _declare_queue(*args, **kwargs)
    _DECLARED.add(queue.name)
    return queue


broker.declare_queue = _recording_declare_queue  # type: ignore[assignment]


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


@pytest.fixture(scope="session")
def urls() -> Iterator[ServiceUrls]:
    with service_urls() as found:
        yield found


def _template_name() -> str:
    digest = hashlib.sha256("".join(m.sql for m in migrations()).encode()).hexdigest()[:12]
    return f"orbit_template_{digest}"


async def _ensure_template(server_url: str) -> str:
    name = _template_name()
    admin = await asyncpg.connect(with_database(server_url, "postgres"))
    try:
        await admin.execute("SELECT pg_advisory_lock($1)", _TEMPLATE_LOCK)
        try:
            if not await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
                await migrate(with_database(server_url, name))
        finally:
            await admin.execute("SELECT pg_advisory_unlock($1)", _TEMPLATE_LOCK)
    finally:
        await admin.close()
    return name


@pytest.fixture(scope="session")
def template_database(urls: ServiceUrls) -> str:
    return asyncio.run(_ensure_template(urls.database))


async def _clone(server_url: str, template: str, name: str) -> None:
    admin = await asyncpg.connect(with_database(server_url, "postgres"))
    try:
        for _ in range(50):
            try:
                await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
                return
            except asyncpg.ObjectInUseError:
                await asyncio.sleep(0.05)  # another worker is cloning the template
        raise RuntimeError(f"could not clone {template}")
    finally:
        await admin.close()


async def _drop(server_url: str, name: str) -> None:
    admin = await asyncpg.connect(with_database(server_url, "postgres"))
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


MAX_TEST_PARTITIONS = 64
"""The most decider partitions any test runs with."""


@dataclass(frozen=True)
class OrbitEnv:
    """One test's Orbit installation: its settings, database and namespace."""

    settings: Settings
    topology: Topology

    def settings_with(self, **changes: object) -> Settings:
        return load_settings(**{**self.settings.model_dump(), **changes})


async def _delete_namespace(amqp_url: str, topology: Topology, task_queues: list[str]) -> None:
    connection = await aio_pika.connect(amqp_url)
    try:
        channel = await connection.channel()
        # A test may run its deciders with more partitions than the installation's
        # default: delete as many as any test uses (deleting a missing queue is a no-op).
        partitions = [topology.decider_queue(p) for p in range(MAX_TEST_PARTITIONS)]
        for queue in (*topology.fixed_queues(), *partitions, *task_queues):
            await channel.queue_delete(queue)
        for exchange in topology.exchanges():
            await channel.exchange_delete(exchange)
    finally:
        await connection.close()


async def _task_queues(database_url: str, topology: Topology) -> list[str]:
    connection = await asyncpg.connect(database_url)
    try:
        rows = await connection.fetch(
            "SELECT DISTINCT c->>'task' AS task, c->>'version' AS version"
            " FROM worker_sessions, jsonb_array_elements(contracts) AS c"
        )
        tasks = {(row["task"], row["version"]) for row in rows}
        definitions = await connection.fetch("SELECT ir::text AS ir FROM definitions")
    finally:
        await connection.close()
    from orbit_model.compiler import definition_from_ir  # noqa: PLC0415

    for row in definitions:
        ir = definition_from_ir(row["ir"]).ir
        tasks.update((name, contract.version) for name, contract in ir.tasks.items())
    return [topology.task_queue(task, version) for task, version in tasks]


@pytest.fixture
async def orbit_env(urls: ServiceUrls, template_database: str) -> AsyncIterator[OrbitEnv]:
    # One RabbitMQ user for all: most tests are about something else, and build services
    # by hand. The end-to-end tests run with a user per role (tests/e2e/conftest.py).
    async with installation(urls, template_database, broker_auth="shared") as env:
        yield env


@contextlib.asynccontextmanager
async def installation(
    urls: ServiceUrls, template_database: str, broker_auth: str
) -> AsyncIterator[OrbitEnv]:
    """A database and a namespace of one test's own; removed afterwards, with the
    namespace's RabbitMQ users (if any were made)."""
    suffix = uuid.uuid4().hex[:10]
    database = f"orbit_test_{suffix}"
    await _clone(urls.database, template_database, database)
    settings = load_settings(
        database_url=with_database(urls.database, database),
        amqp_url=urls.amqp,
        namespace=f"t{suffix}",
        decider_partitions=2,
        # Most tests are about something else; those of auth turn it on (settings_with).
        auth="disabled",
        broker_auth=broker_auth,
    )
    topology = Topology(settings.namespace, settings.decider_partitions)
    try:
        yield OrbitEnv(settings, topology)
    finally:
        try:
            task_queues = await _task_queues(settings.database_url, topology)
            prefix = f"{topology.namespace}."
            task_queues += [name for name in _DECLARED if name.startswith(prefix)]
            await _delete_namespace(urls.amqp, topology, task_queues)
            if broker_auth == "roles":
                async with BrokerAdmin.from_settings(settings) as admin:
                    await remove_namespace(admin, topology)
        finally:
            await _drop(urls.database, database)
