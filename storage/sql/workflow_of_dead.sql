-- name: workflow_of_dead
-- workflow_of_dead: the workflow of dead task $1 when it is the current task of its
-- step in a failed workflow.
--
-- Parameters:
--   $1 uuid: the dead task
-- Returns: workflow_id.
SELECT ws.workflow_id FROM workflow_steps ws
JOIN workflows w ON w.id = ws.workflow_id
WHERE ws.task_id = $1 AND w.status = 'failed'
