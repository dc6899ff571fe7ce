-- name: discard_dead
-- discard_dead deletes a dead task with its attempts, live (tasks and attempts: no
-- foreign key cascades since migration 0033) or in history (task_history, with its
-- attempts in attempt_history), and its idempotency key's reservation, or, within
-- its queue's idempotency window, keeps the key reserved until the window ends (0022).
--
-- Parameters:
--   $1 text: the queue
--   $2 uuid: the id
-- Returns: id (of the task deleted, if any).
WITH live AS (
	DELETE FROM tasks WHERE queue = $1 AND id = $2 AND status = 'dead'
	RETURNING id, idempotency_key
), live_attempts AS (
	DELETE FROM attempts a USING live WHERE a.task_id = live.id
), old AS (
	DELETE FROM task_history WHERE queue = $1 AND id = $2 AND status = 'dead'
	RETURNING id, idempotency_key, finished_at
), old_attempts AS (
	DELETE FROM attempt_history a USING old
	WHERE a.task_status = 'dead' AND a.task_id = old.id AND a.task_finished_at = old.finished_at
), gone AS (
	SELECT id, idempotency_key FROM live
	UNION ALL
	SELECT id, idempotency_key FROM old
), keys AS (
	SELECT taskforge_release_idempotency_keys(array_agg($1::text), array_agg(idempotency_key), array_agg(id)) AS kept
	FROM gone
)
SELECT id FROM gone WHERE (SELECT count(*) FROM keys) >= 0
