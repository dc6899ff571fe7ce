-- name: token_snapshot
-- token_snapshot is what every replica caches: each unrevoked token (expired ones
-- included: they still switch authentication on) with its hash.
--
-- Parameters: none.
-- Returns: id, name, role, queues, rate_limit, created_at, expires_at, revoked_at,
--   hash.
SELECT id, name, role, queues, rate_limit, created_at, expires_at, revoked_at, hash FROM api_tokens WHERE revoked_at IS NULL
