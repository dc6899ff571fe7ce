-- name: nack_task
-- nack_task ends the current attempt as failed (or cancelled, when a cancel was
-- requested) and moves the task to retry, dead or cancelled (taskforge_next_status,
-- after taskforge_backoff_ms when it retries: migration 0016); a workflow step that ends
-- dead or cancelled ends its workflow (taskforge_steps_ended, migration 0017). $7 is the
-- time (NULL: now()). The ended attempt is written from the task row, its outcome
-- counted here (migration 0033; see recorded, written and tallied).
--
-- What this statement shares with release_task stays written in both, on purpose. Their
-- rules are functions already (taskforge_next_status and taskforge_backoff_ms,
-- migration 0016; taskforge_steps_ended, 0017); what is left in common is the lock of
-- the task's workflow (wf_locked) and the plumbing of step_effects. step_effects
-- aggregates this statement's own CTE, which a function cannot read. The lock could be
-- a function, but one that locks is VOLATILE, so PostgreSQL neither inlines it nor
-- shows the lock in the statement's plan, and (before PostgreSQL 18) plans its body anew
-- for each statement that calls it: the lock and the task's row through such a
-- function took 1.05-1.84x the time of wf_locked (pgbench, prepared, three
-- interleaved rounds on the throwaway cluster, load 5-6 on 2 cores).
--
-- Parameters:
--   $1 uuid: the task
--   $2 uuid: its lease token
--   $3 text: the worker holding the lease
--   $4 bool: false: the task dies whatever its budget (a permanent failure)
--   $5 float8: the retry delay in milliseconds (NULL: the queue's backoff)
--   $6 text: the error, stored as last_error
--   $7 timestamptz: the time (NULL: now())
-- Returns: every column of the task row (as get_task), then wf_effects.
WITH wf_locked AS MATERIALIZED (
	SELECT w.id FROM workflows w
	WHERE w.id = (SELECT workflow_id FROM tasks WHERE id = $1)
	FOR UPDATE
), cur AS (
	SELECT t.id,
		taskforge_next_status(t.attempts, t.releases, t.max_retries, t.cancel_requested, $4) AS next_status,
		coalesce($7::timestamptz, now()) + coalesce($5::float8,
			taskforge_backoff_ms(t.attempts, q.backoff_base_ms, q.backoff_max_ms)) * interval '1 millisecond' AS retry_at
	FROM tasks t JOIN queues q ON q.name = t.queue
	WHERE t.id = $1 AND t.lease_token = $2 AND t.claimed_by = $3
	AND t.status || '' = 'executing' AND t.lease_expires_at > coalesce($7::timestamptz, now()) AND (SELECT count(*) FROM wf_locked) >= 0
	FOR UPDATE OF t
), nacked AS (
	UPDATE tasks t SET status = cur.next_status, last_error = $6, updated_at = coalesce($7::timestamptz, now()),
		lease_expires_at = NULL, deadline_at = NULL,
		scheduled_at = CASE WHEN cur.next_status = 'retry' THEN cur.retry_at ELSE t.scheduled_at END,
		finished_at = CASE WHEN cur.next_status = 'retry' THEN NULL ELSE coalesce($7::timestamptz, now()) END
	FROM cur WHERE t.id = cur.id
	RETURNING t.id, t.queue, t.payload, t.priority, t.status, t.scheduled_at, t.attempts,
	t.max_retries, t.timeout_seconds, t.idempotency_key, t.fingerprint, t.last_error, t.result,
	t.claimed_by, t.lease_token, t.heartbeat_at, t.lease_expires_at, t.cancel_requested,
	t.replayed_from, t.replay_count, t.replayed_at, t.attempt_started_at, t.traceparent, t.releases,
	t.progress, t.created_at, t.updated_at, t.finished_at, t.schedule, t.workflow_id, t.step, t.debounce_key, t.debounced, t.group_key
), recorded AS (
	-- a row that a replica of the previous release wrote at the claim is ended in
	-- place (attempts_tally_update counts it, but on a hot-path connection)
	UPDATE attempts a SET status = CASE WHEN nacked.status = 'cancelled' THEN 'cancelled' ELSE 'failed' END, finished_at = coalesce($7::timestamptz, now()), error = $6
	FROM nacked WHERE a.task_id = nacked.id AND a.attempt = nacked.attempts AND a.status = 'executing'
	RETURNING a.queue, a.status, a.finished_at
), written AS (
	-- otherwise the ended attempt is written from the task row (migration 0033)
	INSERT INTO attempts (task_id, attempt, queue, worker_id, lease_token, status, started_at, finished_at, error)
	SELECT nacked.id, nacked.attempts, nacked.queue, nacked.claimed_by, nacked.lease_token, CASE WHEN nacked.status = 'cancelled' THEN 'cancelled' ELSE 'failed' END,
		coalesce(nacked.attempt_started_at, nacked.heartbeat_at, coalesce($7::timestamptz, now())), coalesce($7::timestamptz, now()), $6
	FROM nacked
	WHERE NOT EXISTS (SELECT 1 FROM attempts a WHERE a.task_id = nacked.id AND a.attempt = nacked.attempts)
	RETURNING queue, status, finished_at
), tallied AS (
	-- each ended attempt's outcome once: the rows written here, and those ended in
	-- place when no trigger counts them
	INSERT INTO queue_tally_delta (queue, metric, bucket, delta)
	SELECT queue, 'attempt:' || status, date_bin('10 seconds', finished_at, 'epoch'), count(*)
	FROM (SELECT queue, status, finished_at FROM written
		UNION ALL
		SELECT queue, status, finished_at FROM recorded WHERE tally_written_inline()) e
	GROUP BY 1, 2, 3
), step_effects AS MATERIALIZED (
	SELECT fx.* FROM (SELECT array_agg(id) AS ids, array_agg(workflow_id) AS workflow_ids, array_agg(step) AS steps,
		array_agg(status) AS statuses FROM nacked WHERE workflow_id IS NOT NULL) s
	CROSS JOIN LATERAL taskforge_steps_ended(s.ids, s.workflow_ids, s.steps, s.statuses) fx -- migration 0017
)
SELECT id, queue, payload, priority, status, scheduled_at, attempts, max_retries,
	timeout_seconds, idempotency_key, fingerprint, last_error, result, claimed_by, lease_token,
	heartbeat_at, lease_expires_at, cancel_requested, replayed_from, replay_count, replayed_at,
	attempt_started_at, traceparent, releases, progress, created_at, updated_at, finished_at, schedule,
	workflow_id, step, debounce_key, debounced, group_key, fx.effects AS wf_effects FROM nacked
LEFT JOIN step_effects fx ON fx.effect_of = nacked.id
