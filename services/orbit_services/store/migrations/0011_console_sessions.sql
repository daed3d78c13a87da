-- The console's sign-in sessions (docs/console.md, "Signing in"). The browser's
-- cookie holds a random session id; only its SHA-256 digest is kept here, with
-- who signed in and until when. A session of an API token names the token: each
-- console request's lookup joins it, so revoking the token (or its expiry) ends
-- its sessions at once, on every gateway. A session of an identity provider's
-- JWT holds the JWT's grant, until its exp at the latest. Signing out deletes the
-- row; expired rows are deleted at the next sign-in.
CREATE TABLE console_sessions (
    digest     bytea       PRIMARY KEY,
    token_name text        REFERENCES api_tokens (name) ON DELETE CASCADE,
    name       text        NOT NULL,
    scopes     text[]      NOT NULL,
    workflows  text[]      NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX console_sessions_by_expiry ON console_sessions (expires_at);
