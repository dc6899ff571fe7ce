-- name: enqueue_task_refs
-- enqueue_task_refs is enqueue_tasks (whose header says what each CTE does) returning
-- the task ref columns only, for callers that answer with ids. The two are the same
-- SQL but for the RETURNING list of ins: TestVariantsShareTheirStatement
-- (statements_internal_test.go) fails when they differ elsewhere, so change both.
--
-- Kept beside enqueue_tasks for one figure: serve's CPU per preloaded task in
-- 1,000-task batches, 8.8 µs returning whole tasks, 4.2 µs with this statement (commit
-- 14acab7).
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
-- Returns: id, status, priority, scheduled_at, group_key.
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
	RETURNING id, status, priority, scheduled_at, group_key
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
