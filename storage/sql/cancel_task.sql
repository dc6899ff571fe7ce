-- name: cancel_task
-- cancel_task ends a waiting task at once, or flags an executing one for its worker. It
-- returns the task and the status it had. A workflow step it cancels ends its workflow
-- cancelled (taskforge_steps_ended, migration 0017).
--
-- Parameters:
--   $1 text: the queue
--   $2 uuid: the id
-- Returns: every column of the task row (as get_task), then from_status, wf_effects.
WITH wf_locked AS MATERIALIZED (
	SELECT w.id FROM workflows w
	WHERE w.id = (SELECT workflow_id FROM tasks WHERE queue = $1 AND id = $2)
	FOR UPDATE
), prev AS (
	SELECT id, status FROM tasks
	WHERE queue = $1 AND id = $2 AND status IN ('pending', 'blocked', 'claimed', 'retry', 'executing')
		AND (SELECT count(*) FROM wf_locked) >= 0
	FOR UPDATE
), cancelled AS (
UPDATE tasks t SET
	status = CASE WHEN prev.status = 'executing' THEN 'executing' ELSE 'cancelled' END,
	cancel_requested = (prev.status = 'executing'),
	finished_at = CASE WHEN prev.status = 'executing' THEN t.finished_at ELSE now() END,
	updated_at = now()
FROM prev WHERE t.id = prev.id
RETURNING t.id, t.queue, t.payload, t.priority, t.status, t.scheduled_at, t.attempts,
	t.max_retries, t.timeout_seconds, t.idempotency_key, t.fingerprint, t.last_error, t.result,
	t.claimed_by, t.lease_token, t.heartbeat_at, t.lease_expires_at, t.cancel_requested,
	t.replayed_from, t.replay_count, t.replayed_at, t.attempt_started_at, t.traceparent, t.releases,
	t.progress, t.created_at, t.updated_at, t.finished_at, t.schedule, t.workflow_id, t.step, t.debounce_key, t.debounced, t.group_key, prev.status AS from_status
), step_effects AS MATERIALIZED (
	SELECT fx.* FROM (SELECT array_agg(id) AS ids, array_agg(workflow_id) AS workflow_ids, array_agg(step) AS steps,
		array_agg(status) AS statuses FROM cancelled WHERE workflow_id IS NOT NULL) s
	CROSS JOIN LATERAL taskforge_steps_ended(s.ids, s.workflow_ids, s.steps, s.statuses) fx -- migration 0017
)
SELECT id, queue, payload, priority, status, scheduled_at, attempts, max_retries,
	timeout_seconds, idempotency_key, fingerprint, last_error, result, claimed_by, lease_token,
	heartbeat_at, lease_expires_at, cancel_requested, replayed_from, replay_count, replayed_at,
	attempt_started_at, traceparent, releases, progress, created_at, updated_at, finished_at, schedule,
	workflow_id, step, debounce_key, debounced, group_key, from_status, fx.effects AS wf_effects FROM cancelled
LEFT JOIN step_effects fx ON fx.effect_of = cancelled.id
