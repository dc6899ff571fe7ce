-- name: lock_workflow_tasks
-- lock_workflow_tasks locks the current tasks of workflow $1's steps, live ones (tasks)
-- in id order, then finished ones in history (task_history) in id order, and returns
-- each step with its task's state, in id order.
--
-- Parameters:
--   $1 uuid: the workflow
-- Returns: step, depends_on, id, queue, status.
WITH live AS (
	SELECT ws.step, ws.depends_on, t.id, t.queue, t.status
	FROM workflow_steps ws JOIN tasks t ON t.id = ws.task_id
	WHERE ws.workflow_id = $1
	ORDER BY t.id
	FOR UPDATE OF t
), old AS (
	SELECT ws.step, ws.depends_on, t.id, t.queue, t.status
	FROM workflow_steps ws JOIN task_history t ON t.id = ws.task_id
	WHERE ws.workflow_id = $1 AND t.workflow_id = $1
	ORDER BY t.id
	FOR UPDATE OF t
)
SELECT step, depends_on, id, queue, status FROM (SELECT * FROM live UNION ALL SELECT * FROM old) s
ORDER BY id
