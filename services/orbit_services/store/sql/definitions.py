"""The statements of ``definitions``, the registered workflows
(:mod:`orbit_services.store.event_store` runs them)."""

from __future__ import annotations

from orbit_services.store.statements import Statement

S = Statement.named

INSERT_DEFINITION = S("""
INSERT INTO definitions (name, version, hash, ir, source)
VALUES (:name, :version, :hash, :ir::jsonb, :source)
ON CONFLICT DO NOTHING
""")

DEFINITION_BY_NAME_VERSION = S("""
SELECT name, version, hash, ir::text AS ir, registered_at FROM definitions
WHERE name = :name AND version = :version
""")

DEFINITION_BY_HASH = S("""
SELECT name, version, hash, ir::text AS ir, registered_at FROM definitions WHERE hash = :hash
""")

DEFINITION_VERSIONS = S("SELECT version FROM definitions WHERE name = :name")

LIST_DEFINITIONS = S(
    "SELECT name, version, hash, registered_at FROM definitions ORDER BY name, registered_at"
)

# Which contract version of each task the registered workflows call.
TASK_VERSIONS_IN_USE = S("""
SELECT DISTINCT t.key AS task, t.value->>'version' AS version
FROM definitions, jsonb_each(coalesce(ir->'tasks', '{}'::jsonb)) AS t
""")
