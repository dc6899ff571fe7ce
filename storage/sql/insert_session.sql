-- name: insert_session
-- insert_session records a session for token $1 lasting $3 ms (cut at the token's own
-- expiry), and deletes expired sessions on the way.
--
-- Parameters:
--   $1 uuid: the token
--   $2 bytea: the session's hash
--   $3 float8: the session's length in milliseconds
-- Returns: expires_at.
WITH swept AS (
	DELETE FROM dashboard_sessions WHERE expires_at <= now()
)
INSERT INTO dashboard_sessions (token_id, hash, expires_at)
SELECT t.id, $2, least(now() + $3 * interval '1 millisecond', t.expires_at)
FROM api_tokens t
WHERE t.id = $1 AND t.revoked_at IS NULL
RETURNING expires_at
