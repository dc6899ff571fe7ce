-- name: bulk_cancel_waiting
-- bulk_cancel_waiting cancels up to $3 tasks of queue $1 with status $2 (never
-- executing), oldest first, in the order of tasks_status_list_idx (read backwards) so
-- that LIMIT stops the index scan early. Oldest first, as the dispatcher and the sweep
-- read a queue: the index entries each batch leaves dead are at the front of their
-- scans, where bulk_prune_heads clears them batch by batch (newest first, they piled up
-- behind the live tasks, and the first sweep after the last batch walked a million of
-- them while its replica dispatched nothing). SKIP LOCKED passes over rows a claim or
-- another batch holds, so a batch never waits on live traffic. It returns each task
-- with the status it had and its position. Each batch starts after the keyset position
-- ($4, $5: the last batch's newest task), as an index condition, rather than rescanning
-- the entries its predecessors left behind; the first batch passes NULLs, which start
-- before every task.
--
-- Parameters:
--   $1 text: the queue
--   $2 text: the status to cancel (never executing)
--   $3 int8: the most tasks to cancel
--   $4 timestamptz: the created_at of the keyset position to continue after (NULL: from the start)
--   $5 uuid: the id of the keyset position (NULL: from the start)
-- Returns: id, from_status, attempts, created_at, workflow_id, step, wf_effects.
WITH c AS (
	SELECT id, status, created_at FROM tasks
	WHERE queue = $1 AND status = $2
		AND (created_at, id) > (coalesce($4::timestamptz, '-infinity'),
			coalesce($5::uuid, '00000000-0000-0000-0000-000000000000'))
	ORDER BY created_at, id
	LIMIT $3
	FOR UPDATE SKIP LOCKED
), bulk AS (
	UPDATE tasks t SET status = 'cancelled', finished_at = now(), updated_at = now()
	FROM c WHERE t.id = c.id
	RETURNING t.id, c.status AS from_status, t.attempts, c.created_at, t.status, t.workflow_id, t.step
), step_effects AS MATERIALIZED (
	SELECT fx.* FROM (SELECT array_agg(id) AS ids, array_agg(workflow_id) AS workflow_ids, array_agg(step) AS steps,
		array_agg(status) AS statuses FROM bulk WHERE workflow_id IS NOT NULL) s
	CROSS JOIN LATERAL taskforge_steps_ended(s.ids, s.workflow_ids, s.steps, s.statuses) fx -- migration 0017
)
SELECT id, from_status, attempts, created_at, workflow_id, step, fx.effects AS wf_effects FROM bulk
LEFT JOIN step_effects fx ON fx.effect_of = bulk.id
