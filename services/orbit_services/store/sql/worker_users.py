"""The statements of ``worker_users`` (:mod:`orbit_services.store.worker_users`)."""

from __future__ import annotations

from orbit_services.store.statements import Statement

S = Statement.named

RECORD = S("""
INSERT INTO worker_users (name, tasks) VALUES (:name, :tasks)
ON CONFLICT (name) DO UPDATE SET tasks = excluded.tasks, recorded_at = now()
""")

FORGET = S("DELETE FROM worker_users WHERE name = :name")

TASKS_OF = S("SELECT tasks FROM worker_users WHERE name = :name")
