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

from orbit_sdk import OrbitClient, Worker
from orbit_sdk.lifecycle import Service
from orbit_services.dev import dev_token
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
    client = OrbitClient(f"http://127.0.0.1:{settings.http_port}", token=token)
    try:
        for service in build(services, settings):
            await service.start()
            started.append(service)
        if tasks:
            worker = Worker(tasks, worker_id="e2e", concurrency=concurrency, settings=settings)
            await worker.start()
        yield Stack(settings, client, {s.name: s for s in started}, worker, token)
    finally:
        await client.close()
        if worker is not None:
            await worker.stop()
        for service in reversed(started):
            await service.stop()
