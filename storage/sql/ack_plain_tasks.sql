-- name: ack_plain_tasks
-- ack_plain_tasks is ack_tasks for tasks outside a workflow, which it alone may ack: a
-- workflow step's row is left as it is, as if its lease were not held. Without the
-- workflow CTEs PostgreSQL has a third of ack_tasks' plan to set up on each call. On a
-- hot-path connection it appends its count deltas (tally_written_inline()): executing
-- to done, and the attempt's outcome in its 10-second bucket; and its named groups'
-- (group_tally_written_inline(), one row per group, migration 0028).
--
-- ack_plain_task_refs is the same SQL but for the final SELECT's columns
-- (TestVariantsShareTheirStatement checks it): change both.
--
-- Kept beside ack_tasks for one figure: PostgreSQL's CPU per single-task ack, 650 µs
-- through ack_tasks, 240 µs through this statement on a hot-path connection (commit
-- 94cee95).
--
-- The acked task moves into history in this statement (migration 0023): deleted from
-- tasks and inserted into task_history as done, its ended attempts likewise, rather
-- than updated in tasks for the move trigger to delete and insert again; an update of
-- tasks' status would write an entry into each of its indexes first. The attempt that
-- succeeded is written into attempt_history from the task row (migration 0033: the
-- claim wrote no row), unless a replica of the previous release wrote its row at the
-- claim, which then moves as succeeded. Its outcome is counted here on any connection
-- (no update of attempts for the trigger), once per acked task.
--
-- A task is acked when a row of its id holds its token and worker (the first such
-- row's result is stored): the row at its id's first position in $1, else (an id
-- given twice) the first found by a scalar subquery over the rows; no join
-- (statements.go).
--
-- Parameters:
--   $1 uuid[]: the id of each row
--   $2 uuid[]: the token of each row
--   $3 text[]: the worker of each row
--   $4 text[]: the result of each row
--   $5 timestamptz: the time (NULL: now())
-- Returns: every column of the task row (as get_task), then wf_effects.
WITH acked AS (
	-- the task leaves tasks done, into history as it now is (task_history has the
	-- columns of tasks, in order)
	DELETE FROM tasks t
	WHERE t.id = ANY($1::uuid[]) -- by primary key, no join (statements.go)
		AND (t.lease_token = ($2::uuid[])[array_position($1::uuid[], t.id)]
				AND t.claimed_by = ($3::text[])[array_position($1::uuid[], t.id)]
			-- an id given twice: any of its rows (evaluated only then)
			OR (SELECT true FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS i(id, token, worker)
				WHERE i.id = t.id AND i.token = t.lease_token AND i.worker = t.claimed_by LIMIT 1))
		AND t.status || '' = 'executing' -- by primary key (statements.go)
		AND t.lease_expires_at > coalesce($5::timestamptz, now())
		AND t.workflow_id IS NULL
	RETURNING t.id, t.queue, t.payload, t.priority, 'done'::text AS status, t.scheduled_at, t.attempts,
		t.max_retries, t.timeout_seconds, t.idempotency_key, t.fingerprint, t.last_error,
		CASE WHEN t.lease_token = ($2::uuid[])[array_position($1::uuid[], t.id)]
				AND t.claimed_by = ($3::text[])[array_position($1::uuid[], t.id)]
			THEN ($4::text[])[array_position($1::uuid[], t.id)]
			ELSE (SELECT i.result FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[]) WITH ORDINALITY
				AS i(id, token, worker, result, n)
				WHERE i.id = t.id AND i.token = t.lease_token AND i.worker = t.claimed_by ORDER BY n LIMIT 1)
		END::jsonb AS result,
		t.claimed_by, t.lease_token, NULL::timestamptz AS lease_expires_at, t.heartbeat_at,
		NULL::timestamptz AS deadline_at, t.dispatched_at, t.cancel_requested, t.replayed_from, t.replay_count,
		t.replayed_at, t.created_at, coalesce($5::timestamptz, now()) AS updated_at,
		coalesce($5::timestamptz, now()) AS finished_at, t.attempt_started_at, t.traceparent, t.releases,
		t.progress, t.schedule, t.workflow_id, t.step, t.debounce_key, t.debounced, t.debounce_open, t.group_key
), history AS (
	INSERT INTO task_history SELECT * FROM acked
), gone AS (
	-- its ended attempts leave with it (no foreign key deletes them: migration 0033),
	-- and the current one's row, succeeded, when a replica of the previous release
	-- wrote one at the claim
	DELETE FROM attempts a USING acked
	WHERE a.task_id = acked.id
	RETURNING a.task_id, a.attempt, a.queue, a.worker_id, a.lease_token,
		CASE WHEN a.attempt = acked.attempts THEN 'succeeded' ELSE a.status END AS status, a.started_at,
		CASE WHEN a.attempt = acked.attempts THEN acked.finished_at ELSE a.finished_at END AS finished_at,
		a.error, acked.finished_at AS task_finished_at, a.attempt = acked.attempts AS current
), attempt_rows AS (
	INSERT INTO attempt_history (task_id, attempt, queue, worker_id, lease_token, status, started_at,
		finished_at, error, task_status, task_finished_at)
	SELECT task_id, attempt, queue, worker_id, lease_token, status, started_at, finished_at, error,
		'done', task_finished_at
	FROM gone
	UNION ALL
	-- the attempt that succeeded, from the task row
	SELECT id, attempts, queue, claimed_by, lease_token, 'succeeded',
		coalesce(attempt_started_at, heartbeat_at, finished_at), finished_at, NULL, 'done', finished_at
	FROM acked WHERE NOT EXISTS (SELECT 1 FROM gone WHERE gone.task_id = acked.id AND gone.current)
), recorded AS (
	-- one succeeded attempt per acked task, whichever row holds it
	SELECT queue, finished_at FROM acked
), tallied AS (
	INSERT INTO queue_tally_delta (queue, metric, bucket, delta)
	SELECT queue, metric, bucket, sum(n) FROM (
		SELECT queue, 'executing' AS metric, '-infinity'::timestamptz AS bucket, -1 AS n FROM acked
		WHERE tally_written_inline()
		UNION ALL
		SELECT queue, 'done', '-infinity', 1 FROM acked WHERE tally_written_inline()
		UNION ALL
		-- no update of attempts for their trigger to count: always here
		SELECT queue, 'attempt:succeeded', date_bin('10 seconds', finished_at, 'epoch'), 1 FROM recorded
	) d
	GROUP BY queue, metric, bucket
), grouped AS (
	-- executing leaves its group; done is not a group's count
	INSERT INTO group_tally_delta (queue, group_key, status, delta)
	SELECT queue, group_key, 'executing', -count(*) FROM acked
	WHERE group_key IS NOT NULL AND group_tally_written_inline()
	GROUP BY queue, group_key
)
SELECT id, queue, payload, priority, status, scheduled_at, attempts, max_retries,
	timeout_seconds, idempotency_key, fingerprint, last_error, result, claimed_by, lease_token,
	heartbeat_at, lease_expires_at, cancel_requested, replayed_from, replay_count, replayed_at,
	attempt_started_at, traceparent, releases, progress, created_at, updated_at, finished_at, schedule,
	workflow_id, step, debounce_key, debounced, group_key, NULL::jsonb AS wf_effects FROM acked
