"""Raw SQL against a test's own database: what a test arranges or checks behind the store's back.

The store's pool is private; a test that must look at a table directly (how
many outbox rows are left, a session made to look silent) opens a connection
of its own for each statement.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg


class Database:
    """One test database, by URL."""

    def __init__(self, url: str) -> None:
        self.url = url

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[asyncpg.Connection]:
        connection = await asyncpg.connect(self.url)
        try:
            yield connection
        finally:
            await connection.close()

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        async with self.connection() as connection:
            return list(await connection.fetch(query, *args))

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        async with self.connection() as connection:
            return await connection.fetchrow(query, *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        async with self.connection() as connection:
            return await connection.fetchval(query, *args)

    async def execute(self, query: str, *args: Any) -> str:
        async with self.connection() as connection:
            return str(await connection.execute(query, *args))
