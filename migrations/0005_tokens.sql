-- 0005: API tokens and dashboard sessions (auth/). Only SHA-256 hashes of the secrets
-- are stored; the secrets themselves are shown once, when created.

CREATE TABLE api_tokens (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    name        text        NOT NULL DEFAULT '' CHECK (length(name) <= 200),
    role        text        NOT NULL CHECK (role IN ('producer', 'worker', 'admin')),
    -- Queues the token may touch; NULL = every queue. Admin tokens are never restricted
    -- (an admin can mint tokens, so a restriction would be decoration).
    queues      text[]      CHECK (queues IS NULL OR role <> 'admin'),
    -- Requests per second this token may make on each replica; NULL = the server default.
    rate_limit  double precision CHECK (rate_limit > 0),
    hash        bytea       NOT NULL UNIQUE CHECK (length(hash) = 32),
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz,
    revoked_at  timestamptz
);

-- tokenSnapshot: the unrevoked tokens, read by every replica about once a second.
CREATE INDEX api_tokens_unrevoked_idx ON api_tokens (id) WHERE revoked_at IS NULL;

-- A dashboard session: an HttpOnly cookie whose secret's hash is stored here. It is
-- only valid while its admin token is (revoking the token ends its sessions).
CREATE TABLE dashboard_sessions (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    token_id    uuid        NOT NULL REFERENCES api_tokens (id) ON DELETE CASCADE,
    hash        bytea       NOT NULL UNIQUE CHECK (length(hash) = 32),
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);

CREATE INDEX dashboard_sessions_expires_idx ON dashboard_sessions (expires_at);
