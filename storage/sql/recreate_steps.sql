-- name: recreate_steps
-- recreate_steps gives each step $2 of workflow $1 a new task ($3) copied from its
-- current one (replayed_from; live in tasks or in task_history), blocked while $4 of its dependencies are not done; the
-- dead task being replayed ($5, when among them) is marked replayed.
--
-- Parameters:
--   $1 uuid: the workflow
--   $2 text[]: the steps to recreate
--   $3 uuid[]: the new task of each
--   $4 int[]: how many of each one's dependencies are not done
--   $5 uuid: the dead task being replayed (NULL: none)
-- Returns: every column of the task row (as get_task).
WITH input AS (
	SELECT * FROM unnest($2::text[], $3::uuid[], $4::int[]) AS i(step, new_id, waiting)
), old AS (
	SELECT i.*, ws.task_id AS old_id FROM input i
	JOIN workflow_steps ws ON ws.workflow_id = $1 AND ws.step = i.step
), moved AS (
	UPDATE workflow_steps ws SET task_id = old.new_id, waiting_on = old.waiting
	FROM old WHERE ws.workflow_id = $1 AND ws.step = old.step
), marked AS (
	UPDATE tasks t SET replay_count = t.replay_count + 1, replayed_at = now(), updated_at = now()
	WHERE t.id = $5
), marked_old AS (
	UPDATE task_history t SET replay_count = t.replay_count + 1, replayed_at = now(), updated_at = now()
	WHERE t.id = $5
)
INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries,
	timeout_seconds, replayed_from, schedule, workflow_id, step, group_key)
SELECT old.new_id, src.queue, src.payload, src.priority,
	CASE WHEN old.waiting > 0 THEN 'blocked' ELSE 'pending' END, now(), src.max_retries,
	src.timeout_seconds, src.id, src.schedule, $1, old.step, src.group_key
FROM old JOIN all_tasks src ON src.id = old.old_id
RETURNING id, queue, payload, priority, status, scheduled_at, attempts, max_retries,
	timeout_seconds, idempotency_key, fingerprint, last_error, result, claimed_by, lease_token,
	heartbeat_at, lease_expires_at, cancel_requested, replayed_from, replay_count, replayed_at,
	attempt_started_at, traceparent, releases, progress, created_at, updated_at, finished_at, schedule,
	workflow_id, step, debounce_key, debounced, group_key
