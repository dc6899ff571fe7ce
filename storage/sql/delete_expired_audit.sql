-- name: delete_expired_audit
-- delete_expired_audit deletes up to $2 entries older than $1 ms, oldest first (ids
-- grow with time, so the primary key finds them without an index on at).
--
-- Parameters:
--   $1 float8: the age in milliseconds past which an entry goes
--   $2 int8: the most rows to take
-- Returns: no rows.
DELETE FROM audit_log WHERE id IN (
	SELECT id FROM audit_log WHERE at < now() - $1 * interval '1 millisecond' ORDER BY id LIMIT $2)
