-- name: count_unrevoked_tokens
--
-- Parameters: none.
-- Returns: count.
SELECT count(*) FROM api_tokens WHERE revoked_at IS NULL
