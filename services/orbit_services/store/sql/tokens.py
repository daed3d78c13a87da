"""The statements of ``api_tokens`` (:mod:`orbit_services.store.tokens` runs them)."""

from __future__ import annotations

from orbit_services.store.statements import Statement

S = Statement.named

INSERT_TOKEN = S("""
INSERT INTO api_tokens (name, digest, scopes, workflows, expires_at)
VALUES (:name, :digest, :scopes, :workflows, :expires_at)
ON CONFLICT DO NOTHING
RETURNING name, scopes, workflows, created_at, expires_at, revoked_at, last_used_at
""")

LIST_TOKENS = S("""
SELECT name, scopes, workflows, created_at, expires_at, revoked_at, last_used_at
FROM api_tokens ORDER BY created_at, name
""")

REVOKE_TOKEN = S("""
UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now()) WHERE name = :name
RETURNING name, scopes, workflows, created_at, expires_at, revoked_at, last_used_at
""")

# The grant of a presented token: Postgres's clock decides expiry, so that every
# gateway replica agrees whatever its own clock says.
TOKEN_GRANT = S("""
SELECT name, scopes, workflows FROM api_tokens
WHERE digest = :digest AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
""")

TOUCH_TOKEN = S("UPDATE api_tokens SET last_used_at = now() WHERE name = :name")

COUNT_USABLE_TOKENS = S("""
SELECT count(*) FROM api_tokens
WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
""")
