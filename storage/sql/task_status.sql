-- name: task_status
--
-- Parameters:
--   $1 text: the queue
--   $2 uuid: the id
-- Returns: status.
SELECT status FROM all_tasks WHERE queue = $1 AND id = $2
