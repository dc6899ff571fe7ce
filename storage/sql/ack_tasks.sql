-- name: ack_tasks
-- ack_tasks acks a batch: each input row whose lease is held marks its task done and
-- its attempt succeeded (the acked and recorded CTEs). Rows whose lease is not held
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
	t.progress, t.created_at, t.updated_at, t.finished_at, t.schedule, t.workflow_id, t.step
), recorded AS (
	UPDATE attempts a SET status = 'succeeded', finished_at = coalesce($5::timestamptz, now())
	FROM acked WHERE a.task_id = acked.id AND a.attempt = acked.attempts
	RETURNING a.queue, a.finished_at
), done_steps AS MATERIALIZED (
	SELECT s.id, s.workflow_id, s.step, w.generation FROM acked s
	JOIN workflow_steps ws ON ws.task_id = s.id
	JOIN workflows w ON w.id = s.workflow_id
	WHERE s.workflow_id IS NOT NULL
), freed AS (
	UPDATE workflow_steps c SET waiting_on = c.waiting_on - d.n
	FROM (SELECT e.workflow_id, e.child, cs.task_id, count(*) AS n, (array_agg(s.id ORDER BY s.id))[1] AS by_task
		FROM done_steps s
		JOIN workflow_edges e ON e.workflow_id = s.workflow_id AND e.parent = s.step
		JOIN workflow_steps cs ON cs.workflow_id = e.workflow_id AND cs.step = e.child
		GROUP BY 1, 2, 3) d
	WHERE c.workflow_id = d.workflow_id AND c.step = d.child AND c.task_id = d.task_id
	RETURNING c.task_id, c.waiting_on, d.by_task
), unblocked AS (
	UPDATE tasks t SET status = 'pending', scheduled_at = greatest(t.scheduled_at, now()), updated_at = now()
	FROM freed f WHERE t.id = f.task_id AND f.waiting_on = 0 AND t.status = 'blocked'
	RETURNING t.id, t.queue, t.step, f.by_task
), progressed AS (
	UPDATE workflows w SET steps_left = w.steps_left - d.n, updated_at = now(),
		status = CASE WHEN w.status = 'running' AND w.steps_left = d.n THEN 'succeeded' ELSE w.status END,
		finished_at = CASE WHEN w.status = 'running' AND w.steps_left = d.n THEN now() ELSE w.finished_at END
	FROM (SELECT workflow_id, generation, count(*) AS n, (array_agg(id ORDER BY id DESC))[1] AS by_task
		FROM done_steps GROUP BY 1, 2) d
	WHERE w.id = d.workflow_id AND w.generation = d.generation
	RETURNING w.id, w.status, w.steps_left, d.by_task
), woken AS (
	SELECT count(pg_notify('taskforge_due', q.queue)) AS notified FROM (SELECT DISTINCT queue FROM unblocked) q
), step_effects AS (
	SELECT coalesce(u.by_task, p.by_task) AS effect_of,
		jsonb_build_object('workflow_ended', p.status, 'unblocked', coalesce(u.list, '[]'::jsonb)) AS effects
	FROM (SELECT by_task, jsonb_agg(jsonb_build_object('id', id, 'queue', queue, 'step', step) ORDER BY id) AS list
		FROM unblocked GROUP BY by_task) u
	FULL JOIN (SELECT by_task, status FROM progressed WHERE status = 'succeeded' AND steps_left = 0) p
		ON p.by_task = u.by_task
)
SELECT id, queue, payload, priority, status, scheduled_at, attempts, max_retries,
	timeout_seconds, idempotency_key, fingerprint, last_error, result, claimed_by, lease_token,
	heartbeat_at, lease_expires_at, cancel_requested, replayed_from, replay_count, replayed_at,
	attempt_started_at, traceparent, releases, progress, created_at, updated_at, finished_at, schedule,
	workflow_id, step, fx.effects AS wf_effects
FROM acked CROSS JOIN woken LEFT JOIN step_effects fx ON fx.effect_of = acked.id
