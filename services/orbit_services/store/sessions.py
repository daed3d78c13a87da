"""The worker registry: one ``worker_sessions`` row per registered worker process.

A session is opened by a registration, kept alive by heartbeats (each one
records the tasks the worker holds, so whoever finds the session lost knows
which attempts became uncertain) and closed by an unregistration. Expiring
silent sessions is the liveness service's job; here a closed or unknown
session is an ``UNKNOWN_SESSION`` error, and the worker registers again.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable, Collection, Sequence

from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.messages import InflightTask, RegisterWorker
from orbit_model.workers import WorkerSession
from orbit_services.runtime import metrics
from orbit_services.store import sql
from orbit_services.store.pool import Database, Transaction

DISPATCHER_BEAT_SECONDS = 1.0
"""How often each dispatcher records that it is up."""
DISPATCHER_SILENCE_SECONDS = 3.0
"""A dispatcher not heard from for this long is taken as down (or a third of the
session timeout, if that is longer: a Postgres stall of a few seconds must not
pause expiry again and again)."""


def dispatcher_silence(timeout_ms: int) -> float:
    """Seconds without a beat after which a dispatcher is taken as down."""
    return max(DISPATCHER_SILENCE_SECONDS, timeout_ms / 1000 / 3)


def unknown_session(session_id: str) -> OrbitError:
    return OrbitError(
        ErrorCode.UNKNOWN_SESSION,
        f"unknown or expired worker session {session_id!r}; register again",
    )


def _inflight_json(inflight: Sequence[InflightTask]) -> str:
    return json.dumps([task.model_dump(mode="json") for task in inflight])


def _inflight_from(text: str) -> tuple[InflightTask, ...]:
    return tuple(InflightTask.model_validate(item) for item in json.loads(text))


class SessionStore:
    """Worker sessions in Postgres (``EventStore.sessions``); every statement comes from
    :mod:`.sql.sessions`."""

    def __init__(self, database: Database) -> None:
        self._db = database

    async def open(self, request: RegisterWorker) -> str:
        """Record a new session for ``request`` (already validated); its id."""
        session_id = str(uuid.uuid4())
        contracts = [contract.model_dump(mode="json") for contract in request.contracts]
        await self._db.execute(
            sql.sessions.INSERT_SESSION,
            session_id=session_id,
            worker_id=request.worker_id,
            runtime=request.runtime.lower(),
            sdk=request.sdk,
            contracts=json.dumps(contracts),
        )
        metrics.SESSIONS_OPENED.inc()
        return session_id

    async def touch(self, session_id: str, inflight: Sequence[InflightTask]) -> None:
        """Mark the session seen now, holding ``inflight``.

        Raises:
            OrbitError: ``UNKNOWN_SESSION`` if it was never opened or is closed.
        """
        found = await self._db.fetchval(
            sql.sessions.TOUCH_SESSION, session_id=session_id, inflight=_inflight_json(inflight)
        )
        if found is None:
            raise unknown_session(session_id)

    async def inflight(self, session_id: str) -> tuple[InflightTask, ...]:
        """The tasks an open session held at its last heartbeat.

        Raises:
            OrbitError: ``UNKNOWN_SESSION`` if it was never opened or is closed.
        """
        text = await self._db.fetchval(sql.sessions.SESSION_INFLIGHT, session_id=session_id)
        if text is None:
            raise unknown_session(session_id)
        return _inflight_from(text)

    async def close(self, session_id: str) -> tuple[InflightTask, ...]:
        """Close an open session; the tasks it held at its last heartbeat.

        Raises:
            OrbitError: ``UNKNOWN_SESSION`` if it was never opened or is closed.
        """
        text = await self._db.fetchval(sql.sessions.CLOSE_SESSION, session_id=session_id)
        if text is None:
            raise unknown_session(session_id)
        metrics.SESSIONS_CLOSED.inc()
        return _inflight_from(text)

    async def expire(
        self, timeout_ms: int, report: Callable[[list[tuple[str, InflightTask]]], Awaitable[None]]
    ) -> int:
        """Close every session silent for over ``timeout_ms``; how many.

        Nothing expires unless a dispatcher (one that beat within
        :func:`dispatcher_silence`) has been up for longer than the timeout:
        workers' heartbeats reach Postgres through a dispatcher.
        ``report`` is given (worker_id, task) for each task those sessions held
        and runs inside the transaction: if it fails, the sessions stay open
        and are expired again on the next pass, so no lost task goes unreported.
        A task another open session holds now is not lost: RabbitMQ gave its
        message to that worker when the lost one's connection died, and
        dispatching it again would run it twice.
        """
        async with self._db.transaction() as transaction:
            rows = await transaction.fetch(
                sql.sessions.EXPIRE_SESSIONS,
                timeout_seconds=timeout_ms / 1000,
                silence_seconds=dispatcher_silence(timeout_ms),
            )
            lost = [
                (row["worker_id"], task) for row in rows for task in _inflight_from(row["inflight"])
            ]
            held = await self._held(transaction, [task.token for _, task in lost])
            lost = [(worker_id, task) for worker_id, task in lost if task.token not in held]
            if lost:
                await report(lost)
        metrics.SESSIONS_EXPIRED.inc(len(rows))
        return len(rows)

    async def held_elsewhere(self, tokens: Sequence[str], session_id: str) -> set[str]:
        """The tokens among ``tokens`` an open session other than ``session_id`` holds,
        as of its last heartbeat."""
        return await self._held(self._db, tokens, session_id)

    @staticmethod
    async def _held(
        db: Database | Transaction, tokens: Sequence[str], session_id: str | None = None
    ) -> set[str]:
        if not tokens:
            return set()
        rows = await db.fetch(sql.sessions.HELD_TOKENS, tokens=list(tokens), session_id=session_id)
        return {row["token"] for row in rows}

    async def last_holder(self, token: str) -> str | None:
        """The worker whose session last reported holding the delivery ``token``, if any."""
        value = await self._db.fetchval(sql.sessions.LAST_HOLDER, token=token)
        return None if value is None else str(value)

    async def dispatcher_beat(self, dispatcher_id: str, timeout_ms: int) -> None:
        """Record that the dispatcher ``dispatcher_id`` is up (every
        :data:`DISPATCHER_BEAT_SECONDS`), given the session timeout it serves."""
        await self._db.execute(
            sql.sessions.DISPATCHER_BEAT,
            dispatcher_id=dispatcher_id,
            silence_seconds=dispatcher_silence(timeout_ms),
            timeout=DISPATCHER_BEAT_SECONDS,
        )

    async def online(self) -> int:
        """How many sessions are open."""
        return int(await self._db.fetchval(sql.sessions.COUNT_OPEN_SESSIONS))

    async def heartbeats(self, tokens: Collection[str]) -> dict[str, int]:
        """When the task of each delivery of ``tokens`` last heartbeated (epoch ms), for
        those an open session holds (one query for all of them)."""
        if not tokens:
            return {}
        rows = await self._db.fetch(sql.sessions.DELIVERY_HEARTBEATS, tokens=list(tokens))
        return {row["token"]: int(row["heartbeat_at"]) for row in rows}

    async def sessions(self) -> list[WorkerSession]:
        """Open sessions and those closed within the last hour, by worker."""
        rows = await self._db.fetch(sql.sessions.LIST_SESSIONS)
        return [
            WorkerSession(
                session_id=row["session_id"],
                worker_id=row["worker_id"],
                runtime=row["runtime"],
                sdk=row["sdk"],
                contracts=json.loads(row["contracts"]),
                inflight=_inflight_from(row["inflight"]),
                registered_at=row["registered_at"],
                last_seen=row["last_seen"],
                closed_at=row["closed_at"],
            )
            for row in rows
        ]
