-- name: failed_workflow_steps
-- failed_workflow_steps: which of the dead tasks $1 are the current task of a step of a
-- failed workflow.
--
-- Parameters:
--   $1 uuid[]: the dead tasks
-- Returns: task_id.
SELECT ws.task_id FROM workflow_steps ws
JOIN workflows w ON w.id = ws.workflow_id
WHERE ws.task_id = ANY($1::uuid[]) AND w.status = 'failed'
