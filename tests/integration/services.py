"""Where the integration tests find Postgres and RabbitMQ, and how each test gets its own.

Testcontainers starts both when a Docker engine answers; otherwise the tests
use the running services named by ``ORBIT_TEST_DATABASE_URL`` and
``ORBIT_TEST_AMQP_URL`` (default: the local ones). A service that cannot be
reached fails the tests that need it: it is never a skip.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"


@dataclass(frozen=True)
class ServiceUrls:
    database: str
    """A URL of the server; tests swap in their own database name."""
    amqp: str


def _docker_answers() -> bool:
    if not os.environ.get("DOCKER_HOST") and not Path("/var/run/docker.sock").exists():
        return False  # no engine to ask: do not even open a client
    import docker  # noqa: PLC0415 - only needed when an engine may be there

    try:
        client = docker.from_env(timeout=2)
    except Exception:
        return False
    try:
        return bool(client.ping())
    except Exception:
        return False
    finally:
        client.close()


@contextlib.contextmanager
def service_urls() -> Iterator[ServiceUrls]:
    if os.environ.get("ORBIT_TEST_DATABASE_URL") or not _docker_answers():
        yield ServiceUrls(
            os.environ.get("ORBIT_TEST_DATABASE_URL", DEFAULT_DATABASE_URL),
            os.environ.get("ORBIT_TEST_AMQP_URL", DEFAULT_AMQP_URL),
        )
        return
    from testcontainers.postgres import PostgresContainer  # noqa: PLC0415
    from testcontainers.rabbitmq import RabbitMqContainer  # noqa: PLC0415

    with (
        PostgresContainer("postgres:15", driver=None) as postgres,
        RabbitMqContainer("rabbitmq:3.13") as rabbit,
    ):
        params = rabbit.get_connection_params()
        yield ServiceUrls(
            postgres.get_connection_url(),
            f"amqp://guest:guest@{params.host}:{params.port}/",
        )
