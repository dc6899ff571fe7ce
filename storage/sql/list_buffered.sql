-- name: list_buffered
-- list_buffered pages through every queue's buffered tasks mirrored at least $3 ms ago,
-- in (dispatched_at, id) order after ($1, $2), up to $4 of them, so the repair pass
-- checks a bounded number per statement whatever the number of queues. $5 is the time
-- (NULL: now()).
--
-- Parameters:
--   $1 timestamptz: keyset position: the dispatched_at after which to continue (NULL: from the start)
--   $2 uuid: keyset position: the id after which to continue
--   $3 float8: the least time a task has been buffered, in milliseconds
--   $4 int8: the most rows to take
--   $5 timestamptz: the time (NULL: now())
-- Returns: id, queue, priority, scheduled_at, from_status, traceparent, dispatched_at,
--   group_key ('' for the unnamed group).
SELECT id, queue, priority, scheduled_at, status AS from_status, traceparent,
	dispatched_at, coalesce(group_key, '') AS group_key FROM tasks
WHERE status = 'claimed' AND dispatched_at <= coalesce($5::timestamptz, now()) - $3 * interval '1 millisecond'
	AND ($1::timestamptz IS NULL OR (dispatched_at, id) > ($1, $2::uuid))
ORDER BY dispatched_at, id
LIMIT $4
