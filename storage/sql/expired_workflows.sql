-- name: expired_workflows
-- expired_workflows: up to $2 workflows that finished more than $1 ms ago and none of
-- whose tasks is unfinished or dead (a failed workflow stays while its dead step may
-- resume it), oldest first, locked.
--
-- Parameters:
--   $1 float8: the age in milliseconds past which a finished workflow goes
--   $2 int8: the most rows to take
-- Returns: id.
SELECT w.id FROM workflows w
WHERE w.status <> 'running' AND w.finished_at < now() - $1 * interval '1 millisecond'
	AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.workflow_id = w.id
		AND t.status NOT IN ('done', 'cancelled'))
ORDER BY w.finished_at
LIMIT $2
FOR UPDATE SKIP LOCKED
