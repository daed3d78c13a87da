"""The one reading of this process's wall clock Orbit makes, in the unit every time is
kept in: milliseconds since the epoch (UTC).

A worker stamps its heartbeats with it; a service uses it only before it has read
Postgres's clock (``orbit_services.runtime.clock``), whose time is the one compared.
"""

from __future__ import annotations

import time


def epoch_ms() -> int:
    """Now, by this process's wall clock, in milliseconds since the epoch (UTC)."""
    return int(time.time() * 1000)


__all__ = ["epoch_ms"]
