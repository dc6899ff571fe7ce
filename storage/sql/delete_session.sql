-- name: delete_session
--
-- Parameters:
--   $1 bytea: the hash
-- Returns: no rows.
DELETE FROM dashboard_sessions WHERE hash = $1
