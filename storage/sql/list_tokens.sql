-- name: list_tokens
--
-- Parameters: none.
-- Returns: id, name, role, queues, rate_limit, created_at, expires_at, revoked_at.
SELECT id, name, role, queues, rate_limit, created_at, expires_at, revoked_at FROM api_tokens ORDER BY created_at, id
