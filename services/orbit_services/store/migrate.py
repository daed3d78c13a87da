"""Numbered plain-SQL migrations, applied once each, under an advisory lock.

The files live in ``migrations/`` beside this module (``0001_initial.sql``,
…). ``migrate`` creates the database when it does not exist, takes a
session-level advisory lock so that services started together never race,
and applies in order every file not yet recorded in ``schema_migrations``,
each in its own transaction.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from orbit_model.errors import OrbitError, unreachable
from orbit_services.store import sql
from orbit_services.store.pool import translated
from orbit_services.store.statements import Statement

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    number: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    """Every migration shipped with Orbit, in order."""
    found = []
    for entry in resources.files("orbit_services.store").joinpath("migrations").iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    return sorted(found, key=lambda migration: migration.number)


def _database_name(url: str) -> str:
    return urlsplit(url).path.lstrip("/") or "postgres"


def _maintenance_url(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/postgres"))


async def _run(connection: asyncpg.Connection, statement: Statement, **values: object) -> str:
    with translated():
        return str(await connection.execute(statement.text, *statement.args(**values)))


async def ensure_database(url: str) -> bool:
    """Create the database ``url`` names if it does not exist; whether it was created."""
    name = _database_name(url)
    try:
        connection = await asyncpg.connect(_maintenance_url(url))
    except (OSError, asyncpg.PostgresError) as error:
        raise unreachable("Postgres", url, error) from error
    try:
        with translated():
            exists = await connection.fetchval(
                sql.migrations.DATABASE_EXISTS.text, *sql.migrations.DATABASE_EXISTS.args(name=name)
            )
        if exists:
            return False
        with translated():
            try:
                await connection.execute(f'CREATE DATABASE "{name.replace(chr(34), "")}"')
            except asyncpg.DuplicateDatabaseError:
                return False  # created by someone else meanwhile
        return True
    finally:
        await connection.close()


async def migrate(url: str, progress: Callable[[str], None] | None = None) -> list[Migration]:
    """Bring the database ``url`` up to date; the migrations applied now."""
    report = progress or (lambda _line: None)
    if await ensure_database(url):
        report(f"created database {_database_name(url)}")
    try:
        connection = await asyncpg.connect(url)
    except (OSError, asyncpg.PostgresError) as error:
        raise unreachable("Postgres", url, error) from error
    applied: list[Migration] = []
    try:
        await _run(connection, sql.migrations.LOCK_MIGRATIONS, lock=sql.migrations.MIGRATION_LOCK)
        await _run(connection, sql.migrations.CREATE_MIGRATIONS_TABLE)
        with translated():
            rows = await connection.fetch(sql.migrations.APPLIED_MIGRATIONS.text)
        done = {row["number"] for row in rows}
        for migration in migrations():
            if migration.number in done:
                continue
            report(f"applying migration {migration.number:04d}_{migration.name}")
            with translated():
                async with connection.transaction():
                    await connection.execute(migration.sql)
                    await _run(
                        connection,
                        sql.migrations.RECORD_MIGRATION,
                        number=migration.number,
                        name=migration.name,
                    )
            applied.append(migration)
    finally:
        with contextlib.suppress(OrbitError):  # closing the session releases it anyway
            await _run(
                connection, sql.migrations.UNLOCK_MIGRATIONS, lock=sql.migrations.MIGRATION_LOCK
            )
        await connection.close()
    return applied
