"""The end-to-end tests share the integration fixtures: a database and namespace per test,
but with a RabbitMQ user per role, as ``orbit dev`` and a real installation run."""

from collections.abc import AsyncIterator

import pytest

from tests.integration.conftest import OrbitEnv, installation, template_database, urls
from tests.integration.services import ServiceUrls

__all__ = ["orbit_env", "template_database", "urls"]


@pytest.fixture
async def orbit_env(urls: ServiceUrls, template_database: str) -> AsyncIterator[OrbitEnv]:
    async with installation(urls, template_database, broker_auth="roles") as env:
        yield env
