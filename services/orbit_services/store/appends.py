"""The values of one :data:`~.sql.history.APPEND`: a batch of appends as its named arrays."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from orbit_model.events import event_to_json
from orbit_model.snapshots import SNAPSHOT_VERSION, encode_snapshot
from orbit_services.store.rows import Append, api_status


def _json_or_none(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


def append_values(appends: Sequence[Append], published: Sequence[int]) -> dict[str, Any]:
    """Every parameter of ``APPEND`` for ``appends``, and the outbox rows to delete.

    Rows are written in execution id order, so that two appends touching the
    same executions (a decider batch, a gateway group) lock them in the same
    order; the outbox keeps the order of the messages.
    """
    ordered = sorted(appends, key=lambda a: a.execution_id)
    # An append may carry only outbox messages (no events): it touches no row.
    new = [a for a in ordered if a.events and a.expected_seq == 0]
    old = [a for a in ordered if a.events and a.expected_seq > 0]
    outbox = [message for a in appends for message in a.outbox]
    # Whose commit wrote each row: the outbox is keyed by execution, as every
    # per-execution table (docs/scaling.md).
    outbox_owners = [a.execution_id for a in appends for _ in a.outbox]
    timers = _timer_changes(ordered)
    return {
        **_event_values(ordered),
        **_new_execution_values(new),
        **_changed_execution_values(old),
        **timers,
        **_snapshot_values(ordered),
        "published_ids": list(published),
        "outbox_execution_ids": outbox_owners,
        "outbox_exchanges": [m.exchange for m in outbox],
        "outbox_routing_keys": [m.routing_key for m in outbox],
        "outbox_bodies": [m.body for m in outbox],
        "outbox_headers": [_json_or_none(dict(m.headers)) if m.headers else None for m in outbox],
        "nearest_timer": str(min(timers["set_timer_dues"])) if timers["set_timer_dues"] else None,
    }


def _event_values(appends: Sequence[Append]) -> dict[str, list[Any]]:
    ids: list[str] = []
    seqs: list[int] = []
    types: list[str] = []
    data: list[str] = []
    for append in appends:
        for offset, event in enumerate(append.events, start=1):
            ids.append(append.execution_id)
            seqs.append(append.expected_seq + offset)
            types.append(event.type)
            data.append(event_to_json(event))
    return {
        "event_execution_ids": ids,
        "event_seqs": seqs,
        "event_types": types,
        "event_data": data,
    }


def _error_json(append: Append) -> str | None:
    error = append.state.error
    return None if error is None else error.model_dump_json()


def _new_execution_values(appends: Sequence[Append]) -> dict[str, list[Any]]:
    states = [a.state for a in appends]
    return {
        "new_ids": [a.execution_id for a in appends],
        "new_workflows": [s.workflow for s in states],
        "new_versions": [s.version for s in states],
        "new_hashes": [s.definition_hash for s in states],
        "new_statuses": [api_status(s) for s in states],
        "new_parents": [s.parent for s in states],
        "new_inputs": [_json_or_none(s.input) for s in states],
        "new_last_seqs": [a.expected_seq + len(a.events) for a in appends],
        "new_outputs": [_json_or_none(s.output) for s in states],
        "new_errors": [_error_json(a) for a in appends],
        "new_closed": [s.terminal for s in states],
    }


def _changed_execution_values(appends: Sequence[Append]) -> dict[str, list[Any]]:
    states = [a.state for a in appends]
    return {
        "changed_ids": [a.execution_id for a in appends],
        "changed_statuses": [api_status(s) for s in states],
        "changed_outputs": [_json_or_none(s.output) for s in states],
        "changed_errors": [_error_json(a) for a in appends],
        "changed_last_seqs": [a.expected_seq + len(a.events) for a in appends],
        "changed_closed": [s.terminal for s in states],
    }


def _snapshot_values(appends: Sequence[Append]) -> dict[str, list[Any]]:
    """The snapshots to write: the state after each append asked to leave one."""
    due = [a for a in appends if a.snapshot and a.state.last_seq == a.expected_seq + len(a.events)]
    return {
        "snapshot_ids": [a.execution_id for a in due],
        "snapshot_seqs": [a.state.last_seq for a in due],
        "snapshot_versions": [SNAPSHOT_VERSION] * len(due),
        "snapshot_states": [encode_snapshot(a.state) for a in due],
    }


def _timer_changes(appends: Sequence[Append]) -> dict[str, list[Any]]:
    """The timers each append sets or moves, and those it clears (only what changed)."""
    changes: dict[str, list[Any]] = {
        "set_timer_ids": [],
        "set_timer_keys": [],
        "set_timer_dues": [],
        "cleared_timer_ids": [],
        "cleared_timer_keys": [],
    }
    for append in appends:
        after = append.state.timers
        for key, due in after.items():
            if append.timers_before.get(key) != due:
                changes["set_timer_ids"].append(append.execution_id)
                changes["set_timer_keys"].append(key)
                changes["set_timer_dues"].append(due)
        for key in append.timers_before.keys() - after.keys():
            changes["cleared_timer_ids"].append(append.execution_id)
            changes["cleared_timer_keys"].append(key)
    return changes
