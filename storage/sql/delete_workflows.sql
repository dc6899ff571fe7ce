-- name: delete_workflows
-- delete_workflows deletes every task of workflows $1, live (with their attempts:
-- no foreign key cascades since migration 0033) or in history (with their attempts' history), then the workflows (their
-- steps and edges go by cascade).
--
-- Parameters:
--   $1 uuid[]: the workflows
-- Returns: no rows.
WITH gone AS (DELETE FROM tasks WHERE workflow_id = ANY($1::uuid[]) RETURNING id),
gone_attempts AS (DELETE FROM attempts a USING gone WHERE a.task_id = gone.id),
old AS (
	DELETE FROM task_history WHERE workflow_id = ANY($1::uuid[])
	RETURNING id, status, finished_at
), old_attempts AS (
	DELETE FROM attempt_history a USING old
	WHERE a.task_id = old.id AND a.task_status = old.status AND a.task_finished_at = old.finished_at
)
DELETE FROM workflows WHERE id = ANY($1::uuid[])
