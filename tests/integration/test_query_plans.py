"""The reads of many executions' events stay on the history's key under any plan.

asyncpg prepares each statement, and Postgres gives a prepared statement a
generic plan after a few runs: one that cannot see how many ids the arrays hold
(it guesses ten) and estimates each execution's events from the table's
statistics. With long histories in the table, a join of the ids with the
history then looked cheaper as a hash join over a scan of the whole table, and
every state load cost time in proportion to the table: 194 ms at 250,000 events,
where the key reads in 0.2 ms. This test makes the statistics that tempt that
plan and forces the generic plan.
"""

from __future__ import annotations

import asyncpg
import pytest

from orbit_services.store import sql
from orbit_services.store.statements import Statement

from .conftest import OrbitEnv

EXECUTIONS = 40
EVENTS_EACH = 500


@pytest.mark.parametrize(
    ("name", "statement", "args"),
    [
        (
            "READ_FROM_SNAPSHOTS",
            sql.history.READ_FROM_SNAPSHOTS,
            "(ARRAY['e-1'], ARRAY[0::bigint], 'v')",
        ),
        ("READ_EVENTS_MANY", sql.history.READ_EVENTS_MANY, "(ARRAY['e-1'], ARRAY[0::bigint])"),
    ],
)
async def test_reading_many_executions_uses_the_history_key_in_a_generic_plan(
    orbit_env: OrbitEnv, name: str, statement: Statement, args: str
) -> None:
    connection = await asyncpg.connect(orbit_env.settings.database_url)
    try:
        await connection.execute(
            "INSERT INTO history (execution_id, seq, type, data)"
            " SELECT 'e-' || e, s, 'StepSucceeded', '{}'::jsonb"
            " FROM generate_series(1, $1::int) AS e, generate_series(1, $2::int) AS s",
            EXECUTIONS,
            EVENTS_EACH,
        )
        await connection.execute("ANALYZE history")
        await connection.execute("SET plan_cache_mode = force_generic_plan")
        await connection.execute(f"PREPARE under_test AS {statement.text}")
        plan = "\n".join(
            row[0] for row in await connection.fetch(f"EXPLAIN EXECUTE under_test{args}")
        )
    finally:
        await connection.close()
    assert "Seq Scan" not in plan, f"{name}:\n{plan}"
    assert "history_pkey" in plan, f"{name}:\n{plan}"
