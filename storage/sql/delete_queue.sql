-- name: delete_queue
-- delete_queue deletes a queue; its live tasks go with it (migration 0015's trigger),
-- its finished tasks in history (task_history, attempt_history) here, and so do its
-- idempotency keys.
--
-- Parameters:
--   $1 text: the name
-- Returns: no rows.
WITH keys AS (
	DELETE FROM idempotency_keys WHERE queue = $1
), old AS (
	DELETE FROM task_history WHERE queue = $1
	RETURNING id, status, finished_at
), old_attempts AS (
	DELETE FROM attempt_history a USING old
	WHERE a.task_id = old.id AND a.task_status = old.status AND a.task_finished_at = old.finished_at
)
DELETE FROM queues WHERE name = $1
