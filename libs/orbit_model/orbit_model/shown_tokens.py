"""Delivery tokens as people see them: without their MAC.

A delivery token (``EXECUTION:UNIT:N.MAC``, :func:`orbit_model.attempts.delivery_token`)
is the one secret a result needs besides its sender's login: whoever holds it
can answer for the task. Histories, views, logs and traces name a delivery by
``EXECUTION:UNIT:N`` only, which says which delivery it was and is not enough to
answer for it.
"""

from __future__ import annotations

import re
from typing import Any

from orbit_model.events import Event, TimerFired
from orbit_model.timer_keys import MalformedTimerKey, TimerKey

_TOKEN_FIELDS = ("token", "parent_token")
"""The fields of an event that hold a delivery token (the parent's, for a child)."""
_MAC_IN_JSON = re.compile(r'("(?:token|parent_token|key)"\s*:\s*"[^"\\]*:[0-9]+)\.[^"\\]*"')


def shown_token(token: str) -> str:
    """``token`` without its ``.MAC``: ``EXECUTION:UNIT:N``. The MAC is what follows the
    first dot of the last ``:`` part (the delivery's number), so nothing of it is left
    even in a token never issued."""
    head, colon, last = token.rpartition(":")
    return head + colon + last.partition(".")[0]


def shown_timer_key(key: str) -> str:
    """A timer's key as shown: one ending in a delivery token loses the token's MAC."""
    try:
        timer = TimerKey.parse(key)
    except MalformedTimerKey:
        return key  # names no token
    if not timer.kind.names_token:
        return key
    return str(TimerKey(timer.kind, shown_token(timer.subject)))


def shown_event_data(event: Event) -> dict[str, Any]:
    """An event's fields as a history shows them: no delivery secret, no token's MAC."""
    data = event.model_dump(mode="json", exclude={"type", "delivery_secret"})
    for name in _TOKEN_FIELDS:
        value = data.get(name)
        if isinstance(value, str):
            data[name] = shown_token(value)
    if isinstance(event, TimerFired):
        data["key"] = shown_timer_key(event.key)
    return data


def without_macs(raw_json: str) -> str:
    """A stored event's JSON text (one that no longer decodes) with the MAC of every
    token it names left out."""
    return _MAC_IN_JSON.sub(r'\1"', raw_json)
