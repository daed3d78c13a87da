"""W6's cold load: what a process that holds nothing pays to load one execution.

Timed twice, in the bench's own process: from its snapshot and the events
after it (what ``StateCache`` does), and by a replay from the first event;
both must give the same state. Then the memory the loaded state holds,
counted by ``tracemalloc`` (everything allocated by the load and still alive
after a collection, the decider's lookup index included): the figure the
default ``ORBIT_MAX_HISTORY_EVENTS`` is chosen by (docs/operations.md).
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from typing import Any

from bench.workloads import CheckFailed
from orbit_model.state import ExecutionState, replay
from orbit_services.store import EventStore, StateCache


async def _state_bytes(store: EventStore, execution_id: str) -> tuple[int, int]:
    """The bytes a state loaded from its snapshot holds, and the load's peak."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        cache = StateCache(store, 1)
        state = (await cache.current([execution_id]))[execution_id]
        _ = state.index, state.timers  # built on a decider's first turn
        gc.collect()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del cache, state
    return held - base, peak - base


async def cold_load(database_url: str, execution_id: str) -> dict[str, Any]:
    """Times and memory of loading ``execution_id`` with nothing cached."""
    store = await EventStore.connect(database_url, min_size=1, max_size=1)
    try:
        t0 = time.perf_counter()
        state: ExecutionState = (await StateCache(store, 1).current([execution_id]))[execution_id]
        loaded = time.perf_counter() - t0
        t0 = time.perf_counter()
        events = [stored.event for stored in await store.read_events(execution_id)]
        read = time.perf_counter() - t0
        t0 = time.perf_counter()
        full = replay(events)
        replayed = time.perf_counter() - t0
        if state != full:
            raise CheckFailed(f"W6: {execution_id} loads from its snapshot to another state")
        del events, full
        snapshot = await store.snapshots.of(execution_id)
        held, peak = await _state_bytes(store, execution_id)
    finally:
        await store.close()
    return {
        "events": state.last_seq,
        "snapshot_seq": None if snapshot is None else snapshot[0],
        "from_snapshot_ms": round(loaded * 1000, 1),
        "full_read_ms": round(read * 1000, 1),
        "full_replay_ms": round(replayed * 1000, 1),
        "state_mib": round(held / 2**20, 2),
        "state_bytes_per_event": round(held / state.last_seq),
        "load_peak_mib": round(peak / 2**20, 2),
        "state_is": "tracemalloc: bytes the state loaded from its snapshot holds, its index"
        " included; peak: the most the load held at once (rows, JSON, the state)",
    }
