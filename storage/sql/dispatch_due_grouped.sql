-- name: dispatch_due_grouped
-- dispatch_due_grouped moves, for each (priority, group) pair the dispatcher picked in
-- a fair queue, up to that pair's count of its due tasks from pending/retry to claimed,
-- in eligible-time order, at time $5 (NULL: now()). Each pair reads its own head
-- through tasks_group_dispatch_idx, so a group's backlog costs the others nothing and
-- every group with due work gets its turn into the buffer. SKIP LOCKED lets several
-- dispatchers work the same queue.
--
-- It runs on the hot-path pool (Store.DispatchDueGrouped), and on such a connection
-- appends its own count deltas as the enqueue and the claim do: tallied the queue's
-- (tally_written_inline(), migration 0013), grouped its named groups', one row per
-- group and status (group_tally_written_inline(), migration 0028), where the row
-- triggers would append two rows per task. from_status is the status the row had
-- when head locked it, which the update then changes.
--
-- Parameters:
--   $1 text: the queue
--   $2 int4[]: the priority of each pair
--   $3 text[]: the group of each pair (NULL: the unnamed group)
--   $4 int8[]: the most tasks to move of each pair
--   $5 timestamptz: the time (NULL: now())
-- Returns: id, priority, scheduled_at, from_status, traceparent, group_key ('' for the
--   unnamed group).
WITH pick AS (
	SELECT * FROM unnest($2::int4[], $3::text[], $4::int8[]) AS p(priority, group_key, n)
), named AS (
	SELECT head.id, head.status FROM pick
	CROSS JOIN LATERAL (
		SELECT id, status FROM tasks
		WHERE queue = $1 AND status IN ('pending', 'retry') AND priority = pick.priority
			AND group_key = pick.group_key AND scheduled_at <= coalesce($5::timestamptz, now())
		ORDER BY scheduled_at
		LIMIT pick.n
		FOR UPDATE SKIP LOCKED
	) head
	WHERE pick.group_key IS NOT NULL
), unnamed AS (
	SELECT head.id, head.status FROM pick
	CROSS JOIN LATERAL (
		SELECT id, status FROM tasks
		WHERE queue = $1 AND status IN ('pending', 'retry') AND priority = pick.priority
			AND group_key IS NULL AND scheduled_at <= coalesce($5::timestamptz, now())
		ORDER BY group_key, scheduled_at -- (all NULL) so the index's order serves: no sort
		LIMIT pick.n
		FOR UPDATE SKIP LOCKED
	) head
	WHERE pick.group_key IS NULL
), due AS (
	SELECT * FROM named UNION ALL SELECT * FROM unnamed
), moved AS (
	UPDATE tasks t SET status = 'claimed', dispatched_at = coalesce($5::timestamptz, now()),
		updated_at = coalesce($5::timestamptz, now())
	FROM due WHERE t.id = due.id
	RETURNING t.id, t.priority, t.scheduled_at, due.status AS from_status, t.traceparent, t.group_key
), tallied AS (
	INSERT INTO queue_tally_delta (queue, metric, bucket, delta)
	SELECT $1, metric, '-infinity', sum(n) FROM (
		SELECT from_status AS metric, -count(*) AS n FROM moved GROUP BY from_status
		UNION ALL
		SELECT 'claimed', count(*) FROM moved
	) d
	WHERE tally_written_inline()
	GROUP BY metric
	HAVING sum(n) <> 0
), grouped AS (
	INSERT INTO group_tally_delta (queue, group_key, status, delta)
	SELECT $1, group_key, status, sum(n) FROM (
		SELECT group_key, from_status AS status, -count(*) AS n FROM moved
		WHERE group_key IS NOT NULL GROUP BY group_key, from_status
		UNION ALL
		SELECT group_key, 'claimed', count(*) FROM moved WHERE group_key IS NOT NULL GROUP BY group_key
	) d
	WHERE group_tally_written_inline()
	GROUP BY group_key, status
	HAVING sum(n) <> 0
)
SELECT id, priority, scheduled_at, from_status, traceparent, coalesce(group_key, '') AS group_key FROM moved
