-- name: reclaim_expired
-- reclaim_expired ends up to $1 attempts whose lease (which never outlives the
-- attempt's deadline) has expired: timed_out when the deadline passed, abandoned
-- otherwise, cancelled when a cancel was requested. The task retries while budget
-- remains, else it is dead. $2 is the time (NULL: now()). SKIP LOCKED lets several
-- watchdogs run at once.
--
-- Parameters:
--   $1 int8: the most attempts to end
--   $2 timestamptz: the time (NULL: now())
-- Returns: id, queue, attempts, claimed_by, status, outcome, attempt_started_at,
--   updated_at, workflow_id, step, wf_effects.
WITH cur AS (
	SELECT t.id,
		CASE WHEN t.cancel_requested THEN 'cancelled'
			WHEN t.attempts - t.releases > t.max_retries THEN 'dead'
			ELSE 'retry' END AS next_status,
		CASE WHEN t.cancel_requested THEN 'cancelled'
			WHEN t.deadline_at <= coalesce($2::timestamptz, now()) THEN 'timed_out'
			ELSE 'abandoned' END AS outcome,
		coalesce($2::timestamptz, now()) + least(q.backoff_base_ms * power(2::float8, t.attempts - 1)
	+ floor(random() * (q.backoff_base_ms + 1)), q.backoff_max_ms::float8) * interval '1 millisecond' AS retry_at
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
		t.workflow_id, t.step
), recorded AS (
	UPDATE attempts a SET status = ended.outcome, finished_at = coalesce($2::timestamptz, now()), error = ended.last_error
	FROM ended WHERE a.task_id = ended.id AND a.attempt = ended.attempts
), failed_steps AS MATERIALIZED (
	SELECT DISTINCT ON (s.workflow_id) s.id AS by_task, s.workflow_id, s.step, s.status, w.generation FROM ended s
	JOIN workflow_steps ws ON ws.task_id = s.id
	JOIN workflows w ON w.id = s.workflow_id
	WHERE s.workflow_id IS NOT NULL AND s.status IN ('dead', 'cancelled')
	ORDER BY s.workflow_id, s.status = 'dead' DESC, s.step
), ended_workflows AS (
	UPDATE workflows w SET status = CASE WHEN f.status = 'dead' THEN 'failed' ELSE 'cancelled' END,
		finished_at = now(), updated_at = now()
	FROM failed_steps f
	WHERE w.id = f.workflow_id AND w.status = 'running' AND w.generation = f.generation
	RETURNING w.id, w.status, f.step, f.status AS step_status, f.by_task
), cascade_targets AS MATERIALIZED (
	-- Locked first, so that the status each had is the one the cascade changes.
	SELECT t.id, t.status, e.step AS cause, e.step_status, e.by_task
	FROM ended_workflows e JOIN workflow_steps ws ON ws.workflow_id = e.id
	JOIN tasks t ON t.id = ws.task_id
	WHERE t.status IN ('blocked', 'pending', 'claimed', 'retry', 'executing')
		AND t.id NOT IN (SELECT id FROM ended)
	ORDER BY t.id
	FOR UPDATE OF t
), cascaded AS (
	UPDATE tasks t SET
		status = CASE WHEN t.status = 'executing' THEN 'executing' ELSE 'cancelled' END,
		cancel_requested = (t.status = 'executing'),
		finished_at = CASE WHEN t.status = 'executing' THEN t.finished_at ELSE now() END,
		last_error = 'workflow step ' || c.cause
			|| CASE WHEN c.step_status = 'dead' THEN ' died' ELSE ' was cancelled' END,
		updated_at = now()
	FROM cascade_targets c
	WHERE t.id = c.id
	RETURNING t.id, t.queue, t.step, t.attempts, t.workflow_id, c.status AS from_status, c.by_task
), step_effects AS (
	SELECT e.by_task AS effect_of,
		jsonb_build_object('workflow_ended', e.status, 'cascaded', coalesce(c.list, '[]'::jsonb)) AS effects
	FROM ended_workflows e
	LEFT JOIN (SELECT by_task, jsonb_agg(jsonb_build_object('id', id, 'queue', queue, 'step', step,
			'workflow_id', workflow_id, 'attempts', attempts, 'from_status', from_status) ORDER BY id) AS list
		FROM cascaded GROUP BY by_task) c ON c.by_task = e.by_task
)
SELECT id, queue, attempts, claimed_by, status, outcome, attempt_started_at, updated_at, workflow_id, step,
	fx.effects AS wf_effects
FROM ended
LEFT JOIN step_effects fx ON fx.effect_of = ended.id
