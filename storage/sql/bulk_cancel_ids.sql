-- name: bulk_cancel_ids
-- bulk_cancel_ids cancels the tasks $2 of queue $1 as cancel_task does one: a waiting
-- task ends cancelled, an executing one is flagged for its worker; finished tasks and
-- ids of no task of the queue are left alone.
--
-- Parameters:
--   $1 text: the queue
--   $2 uuid[]: the id
-- Returns: id, from_status, attempts, created_at, workflow_id, step, wf_effects.
WITH c AS (
	SELECT id, status FROM tasks
	WHERE queue = $1 AND id = ANY($2::uuid[])
		AND status IN ('pending', 'claimed', 'retry', 'blocked', 'executing')
	ORDER BY id
	FOR UPDATE
), bulk AS (
	UPDATE tasks t SET
		status = CASE WHEN c.status = 'executing' THEN 'executing' ELSE 'cancelled' END,
		cancel_requested = (c.status = 'executing'),
		finished_at = CASE WHEN c.status = 'executing' THEN t.finished_at ELSE now() END,
		updated_at = now()
	FROM c WHERE t.id = c.id
	RETURNING t.id, c.status AS from_status, t.attempts, t.created_at, t.status, t.workflow_id, t.step
), step_effects AS MATERIALIZED (
	SELECT fx.* FROM (SELECT array_agg(id) AS ids, array_agg(workflow_id) AS workflow_ids, array_agg(step) AS steps,
		array_agg(status) AS statuses FROM bulk WHERE workflow_id IS NOT NULL) s
	CROSS JOIN LATERAL taskforge_steps_ended(s.ids, s.workflow_ids, s.steps, s.statuses) fx -- migration 0017
)
SELECT id, from_status, attempts, created_at, workflow_id, step, fx.effects AS wf_effects FROM bulk
LEFT JOIN step_effects fx ON fx.effect_of = bulk.id
