-- name: list_workers
--
-- Parameters:
--   $1 float8: the heartbeat age in milliseconds past which a worker is stale
-- Returns: id, queues, last_heartbeat_at, current_tasks, stale.
SELECT w.id, w.queues, w.last_heartbeat_at,
	coalesce(array_agg(t.id ORDER BY t.id) FILTER (WHERE t.id IS NOT NULL), '{}') AS current_tasks,
	w.last_heartbeat_at < now() - $1 * interval '1 millisecond' AS stale
FROM workers w LEFT JOIN tasks t ON t.claimed_by = w.id AND t.status = 'executing'
GROUP BY w.id
ORDER BY w.id
