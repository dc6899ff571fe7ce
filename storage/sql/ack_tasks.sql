-- name: ack_tasks
-- ack_tasks acks a batch: each input row whose lease is held marks its task done and
-- its attempt succeeded (the acked, recorded and written CTEs). Rows whose lease is not held
-- change nothing and are simply absent from the result. The dependents of workflow
-- steps it finishes are unblocked in the same statement (the workflow cascade of done
-- steps).
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
), wf_locked AS MATERIALIZED (
	SELECT w.id FROM workflows w
	WHERE w.id IN (SELECT workflow_id FROM tasks WHERE id = ANY($1::uuid[]) AND workflow_id IS NOT NULL)
	ORDER BY w.id
	FOR UPDATE
), acked AS (
	UPDATE tasks t SET status = 'done', result = i.result::jsonb,
		finished_at = coalesce($5::timestamptz, now()), updated_at = coalesce($5::timestamptz, now()),
		lease_expires_at = NULL, deadline_at = NULL
	FROM input i
	WHERE t.id = i.id AND t.lease_token = i.token AND t.claimed_by = i.worker
		AND t.status || '' = 'executing' -- by primary key (statements.go)
		AND t.lease_expires_at > coalesce($5::timestamptz, now())
		AND (SELECT count(*) FROM wf_locked) >= 0
	RETURNING t.id, t.queue, t.payload, t.priority, t.status, t.scheduled_at, t.attempts,
	t.max_retries, t.timeout_seconds, t.idempotency_key, t.fingerprint, t.last_error, t.result,
	t.claimed_by, t.lease_token, t.heartbeat_at, t.lease_expires_at, t.cancel_requested,
	t.replayed_from, t.replay_count, t.replayed_at, t.attempt_started_at, t.traceparent, t.releases,
	t.progress, t.created_at, t.updated_at, t.finished_at, t.schedule, t.workflow_id, t.step, t.debounce_key, t.debounced, t.group_key
), recorded AS (
	-- a row that a replica of the previous release wrote at the claim is ended in
	-- place (attempts_tally_update counts it, but on a hot-path connection), and
	-- moves into history with the task
	UPDATE attempts a SET status = 'succeeded', finished_at = coalesce($5::timestamptz, now())
	FROM acked WHERE a.task_id = acked.id AND a.attempt = acked.attempts AND a.status = 'executing'
	RETURNING a.queue, a.finished_at
), written AS (
	-- otherwise the attempt that succeeded goes from the task row straight into
	-- history (migration 0033), where the move trigger puts the task's ended attempts
	INSERT INTO attempt_history (task_id, attempt, queue, worker_id, lease_token, status, started_at,
		finished_at, error, task_status, task_finished_at)
	SELECT acked.id, acked.attempts, acked.queue, acked.claimed_by, acked.lease_token, 'succeeded',
		coalesce(acked.attempt_started_at, acked.heartbeat_at, acked.finished_at), acked.finished_at, NULL,
		'done', acked.finished_at
	FROM acked
	WHERE NOT EXISTS (SELECT 1 FROM attempts a WHERE a.task_id = acked.id AND a.attempt = acked.attempts)
	RETURNING queue, finished_at
), tallied AS (
	-- each succeeded attempt once: the rows written here, and those ended in place
	-- when no trigger counts them
	INSERT INTO queue_tally_delta (queue, metric, bucket, delta)
	SELECT queue, 'attempt:succeeded', date_bin('10 seconds', finished_at, 'epoch'), count(*)
	FROM (SELECT queue, finished_at FROM written
		UNION ALL
		SELECT queue, finished_at FROM recorded WHERE tally_written_inline()) e
	GROUP BY 1, 3
), step_effects AS MATERIALIZED (
	SELECT fx.* FROM (SELECT array_agg(id) AS ids, array_agg(workflow_id) AS workflow_ids, array_agg(step) AS steps
		FROM acked WHERE workflow_id IS NOT NULL) s
	CROSS JOIN LATERAL taskforge_steps_done(s.ids, s.workflow_ids, s.steps) fx -- migration 0017
)
SELECT id, queue, payload, priority, status, scheduled_at, attempts, max_retries,
	timeout_seconds, idempotency_key, fingerprint, last_error, result, claimed_by, lease_token,
	heartbeat_at, lease_expires_at, cancel_requested, replayed_from, replay_count, replayed_at,
	attempt_started_at, traceparent, releases, progress, created_at, updated_at, finished_at, schedule,
	workflow_id, step, debounce_key, debounced, group_key, fx.effects AS wf_effects
FROM acked LEFT JOIN step_effects fx ON fx.effect_of = acked.id
