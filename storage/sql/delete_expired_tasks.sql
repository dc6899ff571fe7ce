-- name: delete_expired_tasks
-- delete_expired_tasks deletes up to $2 done or cancelled plain tasks of any queue that
-- finished more than $1 ms ago, oldest first through tasks_finished_idx; their attempts
-- go by ON DELETE CASCADE. SKIP LOCKED leaves rows that another transaction holds to a
-- later batch. Their idempotency keys go with them.
--
-- Parameters:
--   $1 float8: the age in milliseconds past which a finished task goes
--   $2 int8: the most rows to take
-- Returns: no rows.
WITH doomed AS (
	SELECT id FROM tasks
	WHERE status IN ('done', 'cancelled') AND finished_at < now() - $1 * interval '1 millisecond'
		AND workflow_id IS NULL -- workflows go whole (expiredWorkflows)
	ORDER BY finished_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED
), gone AS (
	DELETE FROM tasks t USING doomed WHERE t.id = doomed.id
	RETURNING t.queue, t.id, t.idempotency_key
)
DELETE FROM idempotency_keys k USING gone
WHERE k.queue = gone.queue AND k.key = gone.idempotency_key AND k.task_id = gone.id
