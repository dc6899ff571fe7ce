-- name: session_snapshot
-- session_snapshot lists the live dashboard sessions of unrevoked tokens.
--
-- Parameters: none.
-- Returns: hash, token_id, expires_at.
SELECT s.hash, s.token_id, s.expires_at FROM dashboard_sessions s
JOIN api_tokens t ON t.id = s.token_id
WHERE t.revoked_at IS NULL AND s.expires_at > now()
