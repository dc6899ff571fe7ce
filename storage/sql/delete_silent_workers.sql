-- name: delete_silent_workers
-- delete_silent_workers deletes up to $2 workers not heard from for more than $1 ms.
--
-- Parameters:
--   $1 float8: the silence in milliseconds past which a worker goes
--   $2 int8: the most rows to take
-- Returns: no rows.
WITH doomed AS (
	SELECT id FROM workers
	WHERE last_heartbeat_at < now() - $1 * interval '1 millisecond'
	LIMIT $2
	FOR UPDATE SKIP LOCKED
)
DELETE FROM workers w USING doomed WHERE w.id = doomed.id
