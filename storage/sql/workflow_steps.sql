-- name: workflow_steps
-- workflow_steps: the steps of workflows $1 in the order submitted, each with its
-- current task (absent when the task's queue was deleted).
--
-- Parameters:
--   $1 uuid[]: the workflows
-- Returns: workflow_id, step, depends_on, task_id, queue, status, attempts, result,
--   last_error.
SELECT ws.workflow_id, ws.step, ws.depends_on, ws.task_id, t.queue, t.status,
	t.attempts, t.result, t.last_error
FROM workflow_steps ws LEFT JOIN all_tasks t ON t.id = ws.task_id
WHERE ws.workflow_id = ANY($1::uuid[])
ORDER BY ws.workflow_id, ws.ord
