"""``GET /v1/deciders``: who holds which partition of the decider queue.

Read from the lease tables (``store.leases``) as they are now: a decider is
live while it beat within the lease time, and owns a partition while its
lease on it is current. ``balanced`` says whether every partition is owned by
a live decider and the shares differ by one at most, as the leases strive for.
"""

from __future__ import annotations

from typing import Any

from orbit_services.store import EventStore


async def deciders_view(store: EventStore, partitions: int, lease_ms: int) -> dict[str, Any]:
    lease_seconds = lease_ms / 1000
    deciders = await store.leases.deciders(lease_seconds)
    rows = await store.leases.partitions()
    owned: dict[str, list[int]] = {}
    for row in rows:
        if row.owner is not None:
            owned.setdefault(row.owner, []).append(row.partition)
    live = [decider for decider in deciders if decider.live]
    shares = [len(owned.get(decider.decider_id, [])) for decider in live]
    unowned = [row.partition for row in rows if row.owner is None]
    return {
        "partitions": len(rows) or partitions,
        "deciders": [
            {
                "decider_id": decider.decider_id,
                "host": decider.host,
                "pid": decider.pid,
                "started_at": decider.started_at.isoformat(),
                "seen_at": decider.seen_at.isoformat(),
                "live": decider.live,
                "partitions": owned.get(decider.decider_id, []),
            }
            for decider in deciders
        ],
        "unowned": unowned,
        "balanced": bool(live) and not unowned and max(shares) - min(shares) <= 1,
    }
