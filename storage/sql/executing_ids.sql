-- name: executing_ids
-- executing_ids lists a queue's executing tasks, to rebuild its concurrency slots.
--
-- Parameters:
--   $1 text: the queue
-- Returns: id.
SELECT id FROM tasks WHERE queue = $1 AND status = 'executing'
