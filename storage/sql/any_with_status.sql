-- name: any_with_status
-- any_with_status: does queue $1 still hold a task whose status is one of $2?
--
-- Parameters:
--   $1 text: the queue
--   $2 text[]: the status
-- Returns: exists.
SELECT EXISTS (SELECT 1 FROM tasks WHERE queue = $1 AND status = ANY($2::text[]))
