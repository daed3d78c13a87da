"""An installation per test, with a RabbitMQ user per role or one user for all."""

from collections.abc import AsyncIterator

import pytest

from tests.integration.conftest import OrbitEnv, installation, template_database, urls
from tests.integration.services import ServiceUrls

__all__ = ["roles_env", "shared_env", "template_database", "urls"]


@pytest.fixture
async def roles_env(urls: ServiceUrls, template_database: str) -> AsyncIterator[OrbitEnv]:
    async with installation(urls, template_database, broker_auth="roles") as env:
        yield env


@pytest.fixture
async def shared_env(urls: ServiceUrls, template_database: str) -> AsyncIterator[OrbitEnv]:
    async with installation(urls, template_database, broker_auth="shared") as env:
        yield env
