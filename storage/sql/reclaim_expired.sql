-- name: reclaim_expired
-- reclaim_expired ends up to $1 attempts whose lease (which never outlives the
-- attempt's deadline) has expired: timed_out when the deadline passed, abandoned
-- otherwise, cancelled when a cancel was requested. The task retries while budget
-- remains, else it is dead (taskforge_next_status and taskforge_backoff_ms, migration
-- 0016, as nack_task decides). $2 is the time (NULL: now()). SKIP LOCKED lets several
-- watchdogs run at once. The ended attempts are written from the task rows, their
-- outcomes counted here (migration 0033; see recorded, written and tallied).
--
-- Parameters:
--   $1 int8: the most attempts to end
--   $2 timestamptz: the time (NULL: now())
-- Returns: id, queue, attempts, claimed_by, status, outcome, attempt_started_at,
--   updated_at, workflow_id, step, wf_effects, group_key.
WITH cur AS (
	SELECT t.id,
		taskforge_next_status(t.attempts, t.releases, t.max_retries, t.cancel_requested, true) AS next_status,
		CASE WHEN t.cancel_requested THEN 'cancelled'
			WHEN t.deadline_at <= coalesce($2::timestamptz, now()) THEN 'timed_out'
			ELSE 'abandoned' END AS outcome,
		coalesce($2::timestamptz, now())
			+ taskforge_backoff_ms(t.attempts, q.backoff_base_ms, q.backoff_max_ms) * interval '1 millisecond' AS retry_at
	FROM tasks t JOIN queues q ON q.name = t.queue
	WHERE t.status = 'executing' AND t.lease_expires_at <= coalesce($2::timestamptz, now())
	ORDER BY t.lease_expires_at
	LIMIT $1
	FOR UPDATE OF t SKIP LOCKED
), ended AS (
	UPDATE tasks t SET status = cur.next_status, updated_at = coalesce($2::timestamptz, now()),
		last_error = CASE cur.outcome
			WHEN 'timed_out' THEN 'attempt timed out after ' || t.timeout_seconds || ' s'
			WHEN 'abandoned' THEN 'lease expired: worker ' || t.claimed_by || ' stopped heartbeating'
			ELSE t.last_error END,
		lease_expires_at = NULL, deadline_at = NULL,
		scheduled_at = CASE WHEN cur.next_status = 'retry' THEN cur.retry_at ELSE t.scheduled_at END,
		finished_at = CASE WHEN cur.next_status = 'retry' THEN NULL ELSE coalesce($2::timestamptz, now()) END
	FROM cur WHERE t.id = cur.id
	RETURNING t.id, t.queue, t.attempts, t.claimed_by, t.status, t.last_error, cur.outcome,
		-- attempts claimed before migration 0003 have no start on the task row
		coalesce(t.attempt_started_at, t.heartbeat_at, t.updated_at) AS attempt_started_at, t.updated_at,
		t.workflow_id, t.step, t.group_key, t.lease_token
), recorded AS (
	-- a row that a replica of the previous release wrote at the claim is ended in
	-- place (attempts_tally_update counts it, but on a hot-path connection)
	UPDATE attempts a SET status = ended.outcome, finished_at = coalesce($2::timestamptz, now()), error = ended.last_error
	FROM ended WHERE a.task_id = ended.id AND a.attempt = ended.attempts AND a.status = 'executing'
	RETURNING a.queue, a.status, a.finished_at
), written AS (
	-- otherwise the ended attempt is written from the task row (migration 0033)
	INSERT INTO attempts (task_id, attempt, queue, worker_id, lease_token, status, started_at, finished_at, error)
	SELECT ended.id, ended.attempts, ended.queue, ended.claimed_by, ended.lease_token, ended.outcome,
		ended.attempt_started_at, coalesce($2::timestamptz, now()), ended.last_error
	FROM ended
	WHERE NOT EXISTS (SELECT 1 FROM attempts a WHERE a.task_id = ended.id AND a.attempt = ended.attempts)
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
		array_agg(status) AS statuses FROM ended WHERE workflow_id IS NOT NULL) s
	CROSS JOIN LATERAL taskforge_steps_ended(s.ids, s.workflow_ids, s.steps, s.statuses) fx -- migration 0017
)
SELECT id, queue, attempts, claimed_by, status, outcome, attempt_started_at, updated_at, workflow_id, step,
	fx.effects AS wf_effects, group_key
FROM ended
LEFT JOIN step_effects fx ON fx.effect_of = ended.id
