"""What Postgres refuses becomes an OrbitError by whose fault it is (``store.pool``).

A chaos run filled a private cluster's disk for 20 s: every statement failed with
``No space left on device`` (SQLSTATE 53100), which the store called ``INTERNAL``. So
1,541 starts were answered 500, and the decider, which retries only ``UNAVAILABLE``
with backoff, spent its inputs' delivery budgets in milliseconds and parked them.
A server that cannot serve for now is ``UNAVAILABLE``: 503 with ``Retry-After``, and
retried for as long as it lasts.
"""

from __future__ import annotations

import asyncpg
import pytest

from orbit_model.errors import ErrorCode, OrbitError
from orbit_services.store.pool import translated

TRANSIENT = [
    asyncpg.exceptions.DiskFullError("could not extend file: No space left on device"),
    asyncpg.exceptions.OutOfMemoryError("out of memory"),
    asyncpg.exceptions.TooManyConnectionsError("too many clients"),
    asyncpg.exceptions.QueryCanceledError("canceling statement due to statement timeout"),
    asyncpg.exceptions.AdminShutdownError("terminating connection due to administrator"),
    asyncpg.exceptions.ReadOnlySQLTransactionError("cannot execute INSERT in a read-only"),
    asyncpg.exceptions.PostgresSystemError("could not read block: I/O error"),
    TimeoutError(),
]


@pytest.mark.parametrize("error", TRANSIENT, ids=lambda error: type(error).__name__)
def test_a_server_that_cannot_serve_now_is_unavailable(error: BaseException) -> None:
    with pytest.raises(OrbitError) as raised, translated():
        raise error
    assert raised.value.code is ErrorCode.UNAVAILABLE


def test_a_statement_postgres_refuses_for_its_own_sake_is_still_a_bug() -> None:
    with pytest.raises(OrbitError) as raised, translated():
        raise asyncpg.exceptions.UndefinedTableError('relation "nope" does not exist')
    assert raised.value.code is ErrorCode.INTERNAL


def test_a_lost_race_is_a_conflict() -> None:
    with pytest.raises(OrbitError) as raised, translated():
        raise asyncpg.exceptions.UniqueViolationError("duplicate key")
    assert raised.value.code is ErrorCode.CONFLICT
