-- API tokens of the gateway (docs/security.md). Only the SHA-256 digest of a
-- token is kept: the secret is shown once, when the token is made. A request
-- looks its token up by digest on every call, so a revocation (revoked_at set)
-- takes effect at once on every gateway replica.
CREATE TABLE api_tokens (
    name         text        PRIMARY KEY,
    digest       bytea       NOT NULL UNIQUE,
    scopes       text[]      NOT NULL,
    -- Patterns of the workflows the token may touch; empty: every workflow.
    workflows    text[]      NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,
    revoked_at   timestamptz,
    -- Written at most once a minute per gateway, not on every request.
    last_used_at timestamptz
);
