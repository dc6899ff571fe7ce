-- name: dispatch_due
-- dispatch_due moves up to $2 due tasks of a queue from pending/retry to claimed, in
-- buffer order: by eligible time plus $3 ms per priority level (strict priority when $3
-- is huge), at time $4 (NULL: now()). For each priority level it reads two heads, the
-- unnamed group's (tasks_group_dispatch_idx, group_key NULL) and the named groups'
-- (tasks_named_dispatch_idx: a queue without fairness keeps one line across its
-- groups), and merges them all, so its cost does not grow with the backlog (migration
-- 0032). SKIP LOCKED lets several dispatchers work the same queue.
--
-- Parameters:
--   $1 text: the queue
--   $2 int8: the most tasks to move
--   $3 float8: the priority aging: milliseconds of waiting worth one priority level
--   $4 timestamptz: the time (NULL: now())
-- Returns: id, priority, scheduled_at, from_status, traceparent, group_key ('' for the
--   unnamed group).
WITH due AS (
	SELECT head.id, head.status FROM generate_series(1, 10) AS level(priority)
	CROSS JOIN LATERAL (
		SELECT * FROM (SELECT id, status, scheduled_at FROM tasks
			WHERE queue = $1 AND status IN ('pending', 'retry') AND priority = level.priority
				AND group_key IS NULL AND scheduled_at <= coalesce($4::timestamptz, now())
			ORDER BY group_key, scheduled_at -- (all NULL) so the index's order serves: no sort
			LIMIT $2
			FOR UPDATE SKIP LOCKED) unnamed
		UNION ALL
		SELECT * FROM (SELECT id, status, scheduled_at FROM tasks
			WHERE queue = $1 AND status IN ('pending', 'retry') AND priority = level.priority
				AND group_key IS NOT NULL AND scheduled_at <= coalesce($4::timestamptz, now())
			ORDER BY scheduled_at
			LIMIT $2
			FOR UPDATE SKIP LOCKED) named
	) head
	ORDER BY head.scheduled_at + (level.priority - 1) * $3::float8 * interval '1 millisecond'
	LIMIT $2
)
UPDATE tasks t SET status = 'claimed', dispatched_at = coalesce($4::timestamptz, now()),
	updated_at = coalesce($4::timestamptz, now())
FROM due WHERE t.id = due.id
RETURNING t.id, t.priority, t.scheduled_at, due.status AS from_status, t.traceparent,
	coalesce(t.group_key, '') AS group_key
