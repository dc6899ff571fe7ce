-- name: revoke_token
--
-- Parameters:
--   $1 uuid: the id
-- Returns: id, name, role, queues, rate_limit, created_at, expires_at, revoked_at.
UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now())
WHERE id = $1
RETURNING id, name, role, queues, rate_limit, created_at, expires_at, revoked_at
