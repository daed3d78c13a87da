"""Whether Postgres answers, and its clock (:mod:`orbit_services.store.event_store`)."""

from __future__ import annotations

from orbit_services.store.statements import Statement

S = Statement.named

PING = S("SELECT 1")
NOW_MS = S("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
"""Postgres's clock, the one every time Orbit compares is read on (runtime.clock)."""
