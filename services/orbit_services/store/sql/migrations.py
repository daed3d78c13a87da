"""The statements of ``schema_migrations``, and the migrator's lock
(:mod:`orbit_services.store.migrate` runs them)."""

from __future__ import annotations

from orbit_services.store.statements import Statement

S = Statement.named

# An arbitrary constant: the advisory lock every Orbit migrator takes.
MIGRATION_LOCK = 0x0B17_0001

DATABASE_EXISTS = S("SELECT 1 FROM pg_database WHERE datname = :name")
LOCK_MIGRATIONS = S("SELECT pg_advisory_lock(:lock)")
UNLOCK_MIGRATIONS = S("SELECT pg_advisory_unlock(:lock)")
CREATE_MIGRATIONS_TABLE = S(
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " number integer PRIMARY KEY, name text NOT NULL,"
    " applied_at timestamptz NOT NULL DEFAULT now())"
)
APPLIED_MIGRATIONS = S("SELECT number FROM schema_migrations")
RECORD_MIGRATION = S("INSERT INTO schema_migrations (number, name) VALUES (:number, :name)")
