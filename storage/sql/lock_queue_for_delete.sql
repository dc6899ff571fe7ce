-- name: lock_queue_for_delete
-- lock_queue_for_delete blocks new enqueues (their foreign-key check needs KEY SHARE)
-- until the deleting transaction ends.
--
-- Parameters:
--   $1 text: the name
-- Returns: name.
SELECT name FROM queues WHERE name = $1 FOR UPDATE
