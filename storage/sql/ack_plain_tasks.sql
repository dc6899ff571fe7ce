-- name: ack_plain_tasks
-- ack_plain_tasks is ack_tasks for tasks outside a workflow, which it alone may ack: a
-- workflow step's row is left as it is, as if its lease were not held. Without the
-- workflow CTEs PostgreSQL has a third of ack_tasks' plan to set up on each call. On a
-- hot-path connection it appends its count deltas (tally_written_inline()): executing
-- to done, and the attempt's outcome in its 10-second bucket.
--
-- Kept beside ack_tasks for one figure: PostgreSQL's CPU per single-task ack, 650 µs
-- through ack_tasks, 240 µs through this statement on a hot-path connection (commit
-- 94cee95).
--
-- Parameters:
--   $1 uuid[]: the id of each row
--   $2 uuid[]: the token of each row
--   $3 text[]: the worker of each row
--   $4 text[]: the result of each row
--   $5 timestamptz: the time (NULL: now())
-- Returns: every column of the task row (as get_task), then wf_effects.
WITH input AS (
	SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[]) AS i(id, token, worker, result)
), acked AS (
	UPDATE tasks t SET status = 'done', result = i.result::jsonb,
		finished_at = coalesce($5::timestamptz, now()), updated_at = coalesce($5::timestamptz, now()),
		lease_expires_at = NULL, deadline_at = NULL
	FROM input i
	WHERE t.id = i.id AND t.lease_token = i.token AND t.claimed_by = i.worker
		AND t.status || '' = 'executing' -- by primary key (statements.go)
		AND t.lease_expires_at > coalesce($5::timestamptz, now())
		AND t.workflow_id IS NULL
	RETURNING t.id, t.queue, t.payload, t.priority, t.status, t.scheduled_at, t.attempts,
	t.max_retries, t.timeout_seconds, t.idempotency_key, t.fingerprint, t.last_error, t.result,
	t.claimed_by, t.lease_token, t.heartbeat_at, t.lease_expires_at, t.cancel_requested,
	t.replayed_from, t.replay_count, t.replayed_at, t.attempt_started_at, t.traceparent, t.releases,
	t.progress, t.created_at, t.updated_at, t.finished_at, t.schedule, t.workflow_id, t.step, t.debounce_key, t.debounced, t.group_key
), recorded AS (
	UPDATE attempts a SET status = 'succeeded', finished_at = coalesce($5::timestamptz, now())
	FROM acked WHERE a.task_id = acked.id AND a.attempt = acked.attempts
	RETURNING a.queue, a.finished_at
), tallied AS (
	INSERT INTO queue_tally_delta (queue, metric, bucket, delta)
	SELECT queue, metric, bucket, sum(n) FROM (
		SELECT queue, 'executing' AS metric, '-infinity'::timestamptz AS bucket, -1 AS n FROM acked
		UNION ALL
		SELECT queue, 'done', '-infinity', 1 FROM acked
		UNION ALL
		SELECT queue, 'attempt:succeeded', date_bin('10 seconds', finished_at, 'epoch'), 1 FROM recorded
	) d
	WHERE tally_written_inline()
	GROUP BY queue, metric, bucket
)
SELECT id, queue, payload, priority, status, scheduled_at, attempts, max_retries,
	timeout_seconds, idempotency_key, fingerprint, last_error, result, claimed_by, lease_token,
	heartbeat_at, lease_expires_at, cancel_requested, replayed_from, replay_count, replayed_at,
	attempt_started_at, traceparent, releases, progress, created_at, updated_at, finished_at, schedule,
	workflow_id, step, debounce_key, debounced, group_key, NULL::jsonb AS wf_effects FROM acked
