"""Worker sessions expire only while a dispatcher has been up for longer than the timeout.

Heartbeats reach Postgres through a dispatcher: while none is up, or one has
only just come back, a silent session says nothing about its worker, and
expiring them all would redeliver every task in flight.
"""

from __future__ import annotations

from orbit_model.messages import ContractAnnouncement, InflightTask, RegisterWorker
from orbit_services.store import EventStore
from tests.database import Database

from .conftest import OrbitEnv

TIMEOUT_MS = 2_000


async def test_silent_sessions_expire_only_with_a_dispatcher_up_long_enough(
    orbit_env: OrbitEnv,
) -> None:
    store = await EventStore.connect(orbit_env.settings.database_url)
    try:
        registry = store.sessions
        database = Database(orbit_env.settings.database_url)
        request = RegisterWorker(
            worker_id="w-silent", contracts=(ContractAnnouncement(task="t", version="1"),)
        )
        session_id = await registry.open(request)
        await database.execute(
            "UPDATE worker_sessions SET last_seen = now() - interval '1 minute',"
            ' inflight = \'[{"execution_id": "e-1", "token": "e-1:a:1"}]\''
            " WHERE session_id = $1",
            session_id,
        )
        reported: list[tuple[str, InflightTask]] = []

        async def report(lost: list[tuple[str, InflightTask]]) -> None:
            reported.extend(lost)

        # No dispatcher at all: nothing expires.
        assert await registry.expire(TIMEOUT_MS, report) == 0
        # A dispatcher that has only just come up: not yet.
        await registry.dispatcher_beat("d-1", TIMEOUT_MS)
        assert await registry.expire(TIMEOUT_MS, report) == 0
        # Up for longer than the timeout, but silent since: taken as down.
        await database.execute(
            "UPDATE dispatchers SET up_since = now() - interval '1 minute',"
            " seen_at = now() - interval '10 seconds'"
        )
        assert await registry.expire(TIMEOUT_MS, report) == 0
        # Beating again after that silence: its time up starts over.
        await registry.dispatcher_beat("d-1", TIMEOUT_MS)
        assert await registry.expire(TIMEOUT_MS, report) == 0
        # Up and beating for longer than the timeout: the silent session expires.
        await database.execute("UPDATE dispatchers SET up_since = now() - interval '1 minute'")
        await registry.dispatcher_beat("d-1", TIMEOUT_MS)
        assert await registry.expire(TIMEOUT_MS, report) == 1
        assert reported == [("w-silent", InflightTask(execution_id="e-1", token="e-1:a:1"))]
    finally:
        await store.close()


async def test_a_task_another_session_holds_now_is_not_reported_lost(
    orbit_env: OrbitEnv,
) -> None:
    # A worker killed mid-task: RabbitMQ hands its task to another worker at once,
    # and that worker's heartbeat names it long before the dead session expires.
    store = await EventStore.connect(orbit_env.settings.database_url)
    try:
        registry = store.sessions
        database = Database(orbit_env.settings.database_url)
        contracts = (ContractAnnouncement(task="t", version="1"),)
        dead = await registry.open(RegisterWorker(worker_id="w-dead", contracts=contracts))
        alive = await registry.open(RegisterWorker(worker_id="w-alive", contracts=contracts))
        moved = InflightTask(execution_id="e-1", token="t-moved")
        stranded = InflightTask(execution_id="e-2", token="t-stranded")
        await registry.touch(dead, [moved, stranded])
        await registry.touch(alive, [moved])
        await database.execute(
            "UPDATE worker_sessions SET last_seen = now() - interval '1 minute'"
            " WHERE session_id = $1",
            dead,
        )
        await registry.dispatcher_beat("d-1", TIMEOUT_MS)
        await database.execute("UPDATE dispatchers SET up_since = now() - interval '1 minute'")
        reported: list[tuple[str, InflightTask]] = []

        async def report(lost: list[tuple[str, InflightTask]]) -> None:
            reported.extend(lost)

        assert await registry.expire(TIMEOUT_MS, report) == 1
        assert reported == [("w-dead", stranded)]
        assert await registry.held_elsewhere(["t-moved", "t-stranded"], alive) == set()
        assert await registry.held_elsewhere(["t-moved", "t-stranded"], dead) == {"t-moved"}
        # The last worker known to hold a delivery: the newest session naming it.
        assert await registry.last_holder("t-moved") == "w-alive"
        assert await registry.last_holder("t-stranded") == "w-dead"
        assert await registry.last_holder("t-unknown") is None
    finally:
        await store.close()


async def test_a_heartbeat_age_is_recorded_on_postgres_s_clock(orbit_env: OrbitEnv) -> None:
    """A worker sends how long ago its task heartbeated: recorded as a time on Postgres's
    clock, whatever the worker's own (a worker 60 s behind failed every task it
    heartbeated, as its ``heartbeat_at`` was taken as it was)."""
    store = await EventStore.connect(orbit_env.settings.database_url)
    try:
        request = RegisterWorker(
            worker_id="w-skewed", contracts=(ContractAnnouncement(task="t", version="1"),)
        )
        session_id = await store.sessions.open(request)
        skewed = await store.now_ms() - 60_000  # the worker's clock, a minute behind
        await store.sessions.touch(
            session_id,
            [
                InflightTask(
                    execution_id="e-1", token="e-1:a:1", heartbeat_at=skewed, heartbeat_age_ms=800
                ),
                InflightTask(execution_id="e-2", token="e-2:a:1", heartbeat_at=skewed),
            ],
        )
        now = await store.now_ms()
        beats = await store.sessions.heartbeats(["e-1:a:1", "e-2:a:1", "e-3:a:1"])
        aged = beats["e-1:a:1"]
        assert now - 800 - 5_000 <= aged <= now - 800  # a few seconds for a busy machine
        assert beats["e-2:a:1"] == skewed  # an older worker's
        assert "e-3:a:1" not in beats  # nobody holds it
        held = await store.sessions.inflight(session_id)
        assert [task.heartbeat_age_ms for task in held] == [None, None]  # never stored
    finally:
        await store.close()
