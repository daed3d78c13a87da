"""The ``store`` fixture: each test that takes it runs on the plain-Python twin
(``tests/fakes/memory_store.py``) and on the Postgres store, a database of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from orbit_services.store import EventStore, Store
from tests.fakes.memory_store import MemoryStore

from .conftest import installation
from .services import ServiceUrls

STORES = ["memory", "postgres"]


@pytest.fixture(params=STORES)
async def store(
    request: pytest.FixtureRequest, urls: ServiceUrls, template_database: str
) -> AsyncIterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
        return
    async with installation(urls, template_database, broker_auth="shared") as env:
        real = await EventStore.connect(env.settings.database_url)
        try:
            yield real
        finally:
            await real.close()
