-- name: list_buffered
-- list_buffered pages through every queue's buffered tasks mirrored at least $3 ms ago,
-- in (dispatched_at, id) order after ($1, $2), up to $4 of them, so the repair pass
-- checks a bounded number per statement whatever the number of queues. $5 is the time
-- (NULL: now()). The keyset is one row comparison against constants (the start when
-- $1 is NULL), so the scan of tasks_buffered_idx starts at the cursor under any plan:
-- an "$1 IS NULL OR ..." filter, once PostgreSQL switches the prepared statement to
-- its generic plan, read every buffered task before the cursor on every page (with
-- 100,000 buffered heads, 190 ms a page against 1.6 ms).
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
	AND (dispatched_at, id) > (coalesce($1::timestamptz, '-infinity'),
		coalesce($2::uuid, '00000000-0000-0000-0000-000000000000'))
ORDER BY dispatched_at, id
LIMIT $4
