-- name: enqueue_tasks
-- enqueue_tasks is an enqueue's whole write, one statement and one round trip (a commit
-- with it, outside a transaction). In order:
--
--   - q reads the queue's default budget and holds KEY SHARE, so that a concurrent
--     DeleteQueue waits for the enqueue to finish (and then sees its tasks). No queue,
--     no row in q, and nothing is inserted.
--   - When $13 asks, q also says whether tasks due now may go straight to the buffer:
--     the queue is not paused and holds no due task the dispatcher has yet to move (in
--     a fair queue, input asks that of each task's own group instead)
--     (per priority level, one probe of the unnamed group's head in
--     tasks_group_dispatch_idx and one of the named groups' in tasks_named_dispatch_idx,
--     migration 0032), so none jumps ahead of older work. Each ORDER BY is its index's
--     own order, and keeps the probe on it: without it, once ANALYZE has seen other
--     queues' backlogs, the planner takes LIMIT 1 for cheap on a sequential scan of
--     the whole table (80 ms at 40,000 rows, seconds at 2 million).
--   - ins inserts the batch in input order ($12: the schedule that fired them, or
--     NULL); those without a scheduled_at go in dispatched ('claimed') when q allows,
--     as the dispatcher would leave them, for the caller to mirror into the buffer.
--   - keyed reserves the batch's idempotency keys in idempotency_keys first; a task
--     whose key the queue already holds (a live or a finished task's) is skipped (ON
--     CONFLICT DO NOTHING waits for a concurrent inserter of the same key, so
--     concurrent identical requests create one task, and of two rows of one batch
--     with the same key the first goes in).
--   - tallied appends the count deltas on a hot-path connection (tally_written_inline()),
--     grouped the named groups' deltas, one row per group and status however many
--     tasks it has (group_tally_written_inline(), migration 0028).
--   - wake notifies the dispatchers ($2 names the channel) when a task went in
--     pending; the final WHERE is what makes PostgreSQL evaluate it, once.
--
-- enqueue_task_refs is the same write returning fewer columns: the two are the same SQL
-- but for the RETURNING list of ins (TestVariantsShareTheirStatement checks it), so
-- change both.
--
-- Parameters:
--   $1 text: the queue
--   $2 text: the NOTIFY channel of due work (storage.DueChannel)
--   $3 uuid[]: the id of each row
--   $4 text[]: the payload of each row
--   $5 int[]: the priority of each row
--   $6 timestamptz[]: the scheduled_at of each row
--   $7 int[]: the max_retries of each row
--   $8 int[]: the timeout_seconds of each row
--   $9 text[]: the idempotency_key of each row
--   $10 bytea[]: the fingerprint of each row
--   $11 text: the trace context (traceparent) of the request
--   $12 text: the schedule that fired the tasks (NULL: none)
--   $13 bool: true: tasks due now may go straight to the buffer, as claimed
--   $14 text[]: the group_key of each row (NULL: the unnamed group)
-- Returns: every column of the task row (as get_task).
WITH q AS MATERIALIZED (
	SELECT max_retries, fairness IS NOT NULL AS fair, $13::bool AND NOT paused AND (fairness IS NOT NULL OR NOT EXISTS (
		SELECT 1 FROM generate_series(1, 10) AS level(priority)
		CROSS JOIN LATERAL (
			(SELECT 1 FROM tasks
			WHERE queue = $1 AND status IN ('pending', 'retry') AND priority = level.priority
				AND group_key IS NULL AND scheduled_at <= now()
			ORDER BY group_key, scheduled_at
			LIMIT 1)
			UNION ALL
			(SELECT 1 FROM tasks
			WHERE queue = $1 AND status IN ('pending', 'retry') AND priority = level.priority
				AND group_key IS NOT NULL AND scheduled_at <= now()
			ORDER BY scheduled_at
			LIMIT 1)
		) due
	)) AS buffered
	FROM queues WHERE name = $1 FOR KEY SHARE
), unnested AS (
	SELECT * FROM unnest($3::uuid[], $4::text[], $5::int[], $6::timestamptz[], $7::int[], $8::int[],
		$9::text[], $10::bytea[], $14::text[])
		WITH ORDINALITY AS i(id, payload, priority, scheduled_at, max_retries, timeout_seconds,
			idempotency_key, fingerprint, group_key, ord)
), input AS (
	-- direct: the row goes straight to the buffer. In a fair queue, when its own
	-- group holds no due task the dispatcher has yet to move (one probe of
	-- tasks_group_dispatch_idx per priority level): another group's backlog must not
	-- hold a group's first task back for a dispatcher pass. Two probes, so that
	-- each keeps to the index (a named group's, and the unnamed group's).
	SELECT i.*, q.buffered AND i.scheduled_at IS NULL AND (NOT q.fair OR NOT EXISTS (
		SELECT 1 FROM generate_series(1, 10) AS level(priority)
		CROSS JOIN LATERAL (
			SELECT 1 FROM tasks
			WHERE queue = $1 AND status IN ('pending', 'retry') AND priority = level.priority
				AND group_key = i.group_key AND scheduled_at <= now()
			ORDER BY group_key, scheduled_at
			LIMIT 1
		) due
		WHERE i.group_key IS NOT NULL
		UNION ALL
		SELECT 1 FROM generate_series(1, 10) AS level(priority)
		CROSS JOIN LATERAL (
			SELECT 1 FROM tasks
			WHERE queue = $1 AND status IN ('pending', 'retry') AND priority = level.priority
				AND group_key IS NULL AND scheduled_at <= now()
			ORDER BY group_key, scheduled_at
			LIMIT 1
		) due
		WHERE i.group_key IS NULL
	)) AS direct
	FROM unnested i CROSS JOIN q
), keyed AS (
	INSERT INTO idempotency_keys (queue, key, task_id, fingerprint)
	SELECT $1, i.idempotency_key, i.id, i.fingerprint FROM input i CROSS JOIN q
	WHERE i.idempotency_key IS NOT NULL
	ORDER BY i.ord
	ON CONFLICT (queue, key) DO NOTHING
	RETURNING task_id
), ins AS (
	INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at,
		max_retries, timeout_seconds, idempotency_key, fingerprint, traceparent, schedule, dispatched_at,
		group_key)
	SELECT i.id, $1, i.payload::jsonb, i.priority,
		CASE WHEN i.direct THEN 'claimed' ELSE 'pending' END,
		coalesce(i.scheduled_at, now()),
		coalesce(i.max_retries, q.max_retries), i.timeout_seconds, i.idempotency_key, i.fingerprint, $11, $12,
		CASE WHEN i.direct THEN now() END, i.group_key
	FROM input i CROSS JOIN q
	WHERE i.idempotency_key IS NULL OR i.id IN (SELECT task_id FROM keyed)
	ORDER BY i.ord
	RETURNING id, queue, payload, priority, status, scheduled_at, attempts, max_retries,
	timeout_seconds, idempotency_key, fingerprint, last_error, result, claimed_by, lease_token,
	heartbeat_at, lease_expires_at, cancel_requested, replayed_from, replay_count, replayed_at,
	attempt_started_at, traceparent, releases, progress, created_at, updated_at, finished_at, schedule,
	workflow_id, step, debounce_key, debounced, group_key
), tallied AS (
	INSERT INTO queue_tally_delta (queue, metric, bucket, delta)
	SELECT $1, status, '-infinity', count(*) FROM ins WHERE tally_written_inline() GROUP BY status
), grouped AS (
	INSERT INTO group_tally_delta (queue, group_key, status, delta)
	SELECT $1, group_key, status, count(*) FROM ins
	WHERE group_key IS NOT NULL AND group_tally_written_inline()
	GROUP BY group_key, status
), wake AS (
	SELECT pg_notify($2, $1) FROM (SELECT 1 FROM ins WHERE status = 'pending' LIMIT 1) pending
)
SELECT * FROM ins WHERE (SELECT count(*) FROM wake) >= 0
