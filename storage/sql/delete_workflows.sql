-- name: delete_workflows
-- deleteWorkflowTasks deletes every task of workflows $1 (their attempts go by
-- cascade), then the workflows (their steps and edges go by cascade).
--
-- Parameters:
--   $1 uuid[]: the workflows
-- Returns: no rows.
WITH gone AS (DELETE FROM tasks WHERE workflow_id = ANY($1::uuid[]))
DELETE FROM workflows WHERE id = ANY($1::uuid[])
