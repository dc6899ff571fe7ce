-- name: cancel_workflow_tasks
-- cancel_workflow_tasks cancels the unfinished current tasks of workflow $1 (executing
-- ones get cancel_requested), returning each with the status it had.
--
-- Parameters:
--   $1 uuid: the workflow
-- Returns: id, queue, attempts, from_status, workflow_id, step.
WITH c AS (
	SELECT t.id, t.status FROM workflow_steps ws JOIN tasks t ON t.id = ws.task_id
	WHERE ws.workflow_id = $1 AND t.status IN ('blocked', 'pending', 'claimed', 'retry', 'executing')
	ORDER BY t.id
	FOR UPDATE OF t
)
UPDATE tasks t SET
	status = CASE WHEN c.status = 'executing' THEN 'executing' ELSE 'cancelled' END,
	cancel_requested = (c.status = 'executing'),
	finished_at = CASE WHEN c.status = 'executing' THEN t.finished_at ELSE now() END,
	last_error = 'workflow cancelled',
	updated_at = now()
FROM c WHERE t.id = c.id
RETURNING t.id, t.queue, t.attempts, c.status AS from_status, t.workflow_id, t.step
