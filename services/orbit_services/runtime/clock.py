"""The wall clock of the services, in the unit the pure core takes ``now`` in."""

from __future__ import annotations

import time


def epoch_ms() -> int:
    """Now, in milliseconds since the epoch (UTC)."""
    return int(time.time() * 1000)
