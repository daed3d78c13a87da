"""A whole Orbit in the test process: every service, a worker and a client.

Each service is started as it is in production (its own connections, its
own consumers); only the process is shared. Tests that kill a service run it
as a separate process instead (see ``tests/faults``).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from orbit_model.topology import Topology
from orbit_sdk import OrbitClient, Worker
from orbit_sdk.lifecycle import Service
from orbit_services.commands.broker_setup import LocalRoles, provision_local_roles
from orbit_services.commands.dev import dev_token
from orbit_services.runner import build
from orbit_services.runtime.settings import Settings


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Stack:
    settings: Settings
    client: OrbitClient
    services: dict[str, Service]
    worker: Worker | None
    token: str | None = None
    """The admin API token of the client (None with ``ORBIT_AUTH=disabled``)."""
    roles: LocalRoles | None = None
    """The RabbitMQ URL of each role (None with ``ORBIT_BROKER_AUTH=shared``)."""

    @property
    def topology(self) -> Topology:
        return Topology(self.settings.namespace, self.settings.decider_partitions)

    def as_user(self, role: str) -> Settings:
        """The settings of a ``worker`` or ``client`` process of this stack: logged in as
        its RabbitMQ user (as the services, with ``ORBIT_BROKER_AUTH=shared``)."""
        if self.roles is None:
            return self.settings
        url = self.roles.worker if role == "worker" else self.roles.client
        return self.settings.model_copy(update={"amqp_url": url})


@contextlib.asynccontextmanager
async def running_stack(
    settings: Settings,
    tasks: Sequence[Any] = (),
    services: Sequence[str] = ("decider", "dispatcher", "timer", "gateway"),
    concurrency: int = 32,
) -> AsyncIterator[Stack]:
    """Start ``services`` (and a worker for ``tasks``); stop everything on the way out."""
    settings = Settings(**{**settings.model_dump(), "http_port": free_port()})
    started: list[Service] = []
    worker: Worker | None = None
    # With auth on, an admin token as `orbit dev` makes one: saved where the CLI finds it.
    token = await dev_token(settings, say=lambda _: None)
    # A request may wait seconds on a machine busy with other work (and a test may send
    # hundreds at once): the client's 10 s default is for users, not for this.
    client = OrbitClient(f"http://127.0.0.1:{settings.http_port}", token=token, timeout=60)
    # As `orbit dev` does: a RabbitMQ user per role, so every message crosses the checks
    # of a real installation (the test's namespace and its users are removed after it).
    roles = None
    if settings.broker_auth == "roles":
        # Saved where `orbit dev` keeps them: a worker or client process started by a test
        # without ORBIT_AMQP_URL logs in as the user would (the file is the test run's).
        roles = await provision_local_roles(settings, label="e2e")
    try:
        for service in build(services, settings, None if roles is None else roles.services):
            await service.start()
            started.append(service)
        if tasks:
            worker_settings = (
                settings
                if roles is None
                else settings.model_copy(update={"amqp_url": roles.worker})
            )
            worker = Worker(
                tasks, worker_id="e2e", concurrency=concurrency, settings=worker_settings
            )
            await worker.start()
        yield Stack(settings, client, {s.name: s for s in started}, worker, token, roles)
    finally:
        await client.close()
        if worker is not None:
            await worker.stop()
        for service in reversed(started):
            await service.stop()
