-- name: task_attempts
--
-- Parameters:
--   $1 uuid: the task_id
-- Returns: attempt, worker_id, status, started_at, finished_at, error.
SELECT attempt, worker_id, status, started_at, finished_at, error
FROM attempts WHERE task_id = $1 ORDER BY attempt
