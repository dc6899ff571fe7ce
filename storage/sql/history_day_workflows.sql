-- name: history_day_workflows
-- history_day_workflows: up to $4 finished workflows with a task in the day partition
-- of status $1 that covers [$2, $3), locked, so that they leave whole (delete_workflows)
-- before their day's partition does. A running workflow holds its day back.
--
-- Parameters:
--   $1 text: the status
--   $2 timestamptz: the start of the day
--   $3 timestamptz: the end of the day
--   $4 int8: the most rows to take
-- Returns: id.
SELECT w.id FROM workflows w
WHERE w.status <> 'running' AND w.id IN (
	SELECT t.workflow_id FROM task_history t
	WHERE t.status = $1 AND t.finished_at >= $2 AND t.finished_at < $3 AND t.workflow_id IS NOT NULL)
ORDER BY w.id
LIMIT $4
FOR UPDATE SKIP LOCKED
