-- name: bulk_cancel_waiting
-- bulk_cancel_waiting cancels up to $3 tasks of queue $1 with status $2 (never
-- executing), oldest first, in the order of tasks_status_list_idx (read backwards) so
-- that LIMIT stops the index scan early. Oldest first, as the dispatcher and the sweep
-- read a queue: the index entries each batch leaves dead are at the front of their
-- scans, where bulk_prune_heads clears them batch by batch (newest first, they piled up
-- behind the live tasks, and the first sweep after the last batch walked a million of
-- them while its replica dispatched nothing). SKIP LOCKED passes over rows a claim or
-- another batch holds, so a batch never waits on live traffic. It returns each task
-- with the status it had and its position. bulk_cancel_waiting_after is the same from
-- after the keyset position ($4, $5): each batch starts where the last ended, as an
-- index condition, rather than rescanning the entries its predecessors left behind.
--
-- Parameters:
--   $1 text: the queue
--   $2 text: the status to cancel (never executing)
--   $3 int8: the most tasks to cancel
-- Returns: id, from_status, attempts, created_at, workflow_id, step, wf_effects.
WITH c AS (
	SELECT id, status, created_at FROM tasks
	WHERE queue = $1 AND status = $2
	ORDER BY created_at, id
	LIMIT $3
	FOR UPDATE SKIP LOCKED
), bulk AS (
	UPDATE tasks t SET status = 'cancelled', finished_at = now(), updated_at = now()
	FROM c WHERE t.id = c.id
	RETURNING t.id, c.status AS from_status, t.attempts, c.created_at, t.status, t.workflow_id, t.step
), failed_steps AS MATERIALIZED (
	SELECT DISTINCT ON (s.workflow_id) s.id AS by_task, s.workflow_id, s.step, s.status, w.generation FROM bulk s
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
		AND t.id NOT IN (SELECT id FROM bulk)
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
SELECT id, from_status, attempts, created_at, workflow_id, step, fx.effects AS wf_effects FROM bulk
LEFT JOIN step_effects fx ON fx.effect_of = bulk.id
