-- name: lock_queues_for_workflow
-- lock_queues_for_workflow reads the named queues' default budgets, holding KEY SHARE
-- as enqueue_tasks does.
--
-- Parameters:
--   $1 text[]: the name
-- Returns: name, max_retries.
SELECT name, max_retries FROM queues WHERE name = ANY($1::text[])
ORDER BY name FOR KEY SHARE
