-- name: lock_workflow_tasks
-- lock_workflow_tasks locks the current tasks of workflow $1's steps, in id order, and
-- returns each step with its task's state.
--
-- Parameters:
--   $1 uuid: the workflow
-- Returns: step, depends_on, id, queue, status.
SELECT ws.step, ws.depends_on, t.id, t.queue, t.status
FROM workflow_steps ws JOIN tasks t ON t.id = ws.task_id
WHERE ws.workflow_id = $1
ORDER BY t.id
FOR UPDATE OF t
