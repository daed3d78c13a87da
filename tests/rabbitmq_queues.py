"""What RabbitMQ holds in a queue now, read live with ``rabbitmqctl``.

The management API's message counts are sampled every few seconds, so a test
that waits for a delivery to be settled (taken and acknowledged, not given
back) asks the broker itself.
"""

from __future__ import annotations

import subprocess


def queue_counts(queue: str) -> tuple[int, int] | None:
    """``queue``'s messages ready and unacknowledged; None if it does not exist."""
    listed = subprocess.run(
        [
            *("rabbitmqctl", "list_queues", "-p", "/", "-q", "--no-table-headers"),
            *("name", "messages_ready", "messages_unacknowledged"),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    for line in listed.stdout.splitlines():
        name, ready, unacked = line.split()
        if name == queue:
            return int(ready), int(unacked)
    return None
