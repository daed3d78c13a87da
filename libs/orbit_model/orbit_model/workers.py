"""Worker sessions as the views read them: who serves which contract, who holds what.

The store keeps one ``worker_sessions`` row per registered worker process;
these are its value type and the pure summaries the API shows of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from orbit_model.json_value import Json
from orbit_model.messages import InflightTask


@dataclass(frozen=True)
class WorkerSession:
    """One worker session as the store holds it.

    Attributes:
        contracts: The announced contracts, each ``{task, version, input_schema,
            output_schema}``.
        inflight: The tasks the worker held at its last heartbeat.
        closed_at: When it unregistered or was found lost; None while open.
    """

    session_id: str
    worker_id: str
    runtime: str
    sdk: str | None
    contracts: list[dict[str, Json]]
    inflight: tuple[InflightTask, ...]
    registered_at: datetime
    last_seen: datetime
    closed_at: datetime | None


@dataclass(frozen=True)
class Workers:
    """The live worker sessions a view needs: who serves which ``task@version``, who holds what.

    Attributes:
        online: ``task@version`` to the number of live sessions announcing it.
        holders: Delivery token to the worker holding it at its last heartbeat.
    """

    online: Mapping[str, int] = field(default_factory=dict)
    holders: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, sessions: list[WorkerSession], seen_after: datetime) -> Workers:
        """From every session, counting those open and seen after ``seen_after``."""
        online: dict[str, int] = {}
        holders: dict[str, str] = {}
        for session in sessions:
            if session.closed_at is not None or session.last_seen <= seen_after:
                continue
            served = {f"{c.get('task')}@{c.get('version')}" for c in session.contracts}
            for task in served:
                online[task] = online.get(task, 0) + 1
            for held in session.inflight:
                holders[held.token] = session.worker_id
        return cls(online, holders)


def worker_view(
    worker_id: str, sessions: list[WorkerSession], seen_after: datetime
) -> dict[str, Json]:
    """A worker from its sessions (oldest first); those seen after ``seen_after`` are live."""
    latest = sessions[-1]  # sessions come ordered by registration
    live = [s for s in sessions if s.closed_at is None and s.last_seen > seen_after]
    return {
        "worker_id": worker_id,
        "runtime": latest.runtime,
        "sdk": latest.sdk,
        "contracts": [
            {"task": contract.get("task"), "version": contract.get("version")}
            for contract in latest.contracts
        ],
        "online": bool(live),
        "sessions": len(live),
        "inflight": sum(len(s.inflight) for s in live),
        "last_seen": max(s.last_seen for s in sessions).isoformat(),
    }
