-- name: insert_token
--
-- Parameters:
--   $1 text: name
--   $2 text: role
--   $3 text[]: queues
--   $4 float8: rate_limit
--   $5 bytea: hash
--   $6 float8: expires_at, as milliseconds from now (NULL: never)
-- Returns: id, name, role, queues, rate_limit, created_at, expires_at, revoked_at.
INSERT INTO api_tokens (name, role, queues, rate_limit, hash, expires_at)
VALUES ($1, $2, $3, $4, $5, now() + $6 * interval '1 millisecond')
RETURNING id, name, role, queues, rate_limit, created_at, expires_at, revoked_at
