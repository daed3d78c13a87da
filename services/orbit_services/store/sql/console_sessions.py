"""The statements of ``console_sessions``
(:mod:`orbit_services.store.console_sessions` runs them)."""

from __future__ import annotations

from orbit_services.store.statements import Statement

S = Statement.named

# A sign-in also deletes the sessions that have ended, so that the table holds only
# the live ones and those ended since the last sign-in.
OPEN = S("""
WITH ended AS (DELETE FROM console_sessions WHERE expires_at <= now())
INSERT INTO console_sessions (digest, token_name, name, scopes, workflows, expires_at)
VALUES (:digest, :token_name, :name, :scopes, :workflows,
        least(now() + make_interval(secs => :seconds), :until::timestamptz))
""")

GRANT = S("""
SELECT s.token_name, s.name, s.scopes, s.workflows
FROM console_sessions AS s LEFT JOIN api_tokens AS t ON t.name = s.token_name
WHERE s.digest = :digest AND s.expires_at > now()
  AND (s.token_name IS NULL
       OR (t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())))
""")

END = S("DELETE FROM console_sessions WHERE digest = :digest")
