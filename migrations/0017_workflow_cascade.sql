-- 0017: a workflow's cascades, written once.
--
-- A workflow's bookkeeping rides inside the statements that end its steps' tasks, so
-- it commits with them or not at all. Those statements lock each workflow first
-- (before any of its tasks, in id order), end their tasks, then call one of these
-- functions once, with the rows of the tasks they ended that are workflow steps
-- (each function is STRICT: a statement that ended no step passes NULL and the
-- function does not run). Each returns, per task that changed its workflow, what it
-- changed (effect_of: the task; effects: jsonb), for the caller's follow-ups.
--
-- Only the current task of a step counts (workflow_steps.task_id): a task a resume
-- replaced changes nothing when it ends. Each reads workflow_steps in its own
-- snapshot; where a resume may have committed since, the update re-checks the row it
-- changes (task_id, generation) as PostgreSQL re-reads a row updated concurrently.
--
-- taskforge_steps_done(ids, workflow_ids, steps): the tasks just made done. Their
-- dependents whose dependencies are now all done move from blocked to pending (each
-- credited to the first of its parents, in id order, finished in this call), their
-- queues' dispatchers are woken (NOTIFY taskforge_due, delivered at commit, as an
-- enqueue's), and a workflow whose last step is done ends succeeded (reported on the
-- row of the newest step done in this call). Effects: {"workflow_ended": status or
-- null, "unblocked": [{id, queue, step}]}.
CREATE FUNCTION taskforge_steps_done(ids uuid[], workflow_ids uuid[], steps text[])
RETURNS TABLE (effect_of uuid, effects jsonb)
LANGUAGE sql VOLATILE STRICT AS $$
WITH input AS (
	SELECT * FROM unnest(ids, workflow_ids, steps) AS i(id, workflow_id, step)
), done_steps AS MATERIALIZED (
	SELECT s.id, s.workflow_id, s.step, w.generation FROM input s
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
SELECT fx.effect_of, fx.effects FROM step_effects fx CROSS JOIN woken
$$;

-- taskforge_steps_ended(ids, workflow_ids, steps, statuses): the tasks just ended
-- (statuses: each one's new status). Those dead or cancelled end their workflows,
-- failed or cancelled (when several steps of one workflow end in one call, a dead
-- one names the failure), and every other unfinished step is cancelled, executing
-- ones flagged cancel_requested, each with a last_error naming the step. Effects, on
-- the row of the step that ended a workflow: {"workflow_ended": status, "cascaded":
-- [{id, queue, step, workflow_id, attempts, from_status}]}.
CREATE FUNCTION taskforge_steps_ended(ids uuid[], workflow_ids uuid[], steps text[], statuses text[])
RETURNS TABLE (effect_of uuid, effects jsonb)
LANGUAGE sql VOLATILE STRICT AS $$
WITH input AS (
	SELECT * FROM unnest(ids, workflow_ids, steps, statuses) AS i(id, workflow_id, step, status)
), failed_steps AS MATERIALIZED (
	SELECT DISTINCT ON (s.workflow_id) s.id AS by_task, s.workflow_id, s.step, s.status, w.generation FROM input s
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
		AND t.id NOT IN (SELECT id FROM input)
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
SELECT fx.effect_of, fx.effects FROM step_effects fx
$$;
