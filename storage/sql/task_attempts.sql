-- name: task_attempts
-- task_attempts reads a task's attempts, live (attempts) or finished (attempt_history).
--
-- Parameters:
--   $1 uuid: the task_id
-- Returns: attempt, worker_id, status, started_at, finished_at, error.
SELECT attempt, worker_id, status, started_at, finished_at, error
FROM all_attempts WHERE task_id = $1 ORDER BY attempt
