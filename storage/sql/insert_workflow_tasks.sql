-- name: insert_workflow_tasks
-- insert_workflow_tasks inserts the steps' tasks of workflow $1: blocked when $10 (the
-- step has dependencies), else pending. $11: default budgets, per task; $12: the
-- submission's trace context.
--
-- Parameters:
--   $1 uuid: the workflow
--   $2 uuid[]: the id of each row
--   $3 text[]: the queue of each row
--   $4 text[]: the payload of each row
--   $5 int[]: the priority of each row
--   $6 timestamptz[]: the scheduled_at of each row
--   $7 int[]: the max_retries of each row
--   $8 int[]: the timeout_seconds of each row
--   $9 text[]: the step of each row
--   $10 bool[]: true for each step that has dependencies (it starts blocked)
--   $11 int[]: each task's queue's default max_retries
--   $12 text: the trace context (traceparent) of the submission
--   $13 text[]: the group_key of each row (NULL: the unnamed group)
-- Returns: no rows.
INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at,
	max_retries, timeout_seconds, workflow_id, step, traceparent, group_key)
SELECT i.id, i.queue, i.payload::jsonb, i.priority, CASE WHEN i.blocked THEN 'blocked' ELSE 'pending' END,
	coalesce(i.scheduled_at, now()), coalesce(i.max_retries, i.default_retries), i.timeout_seconds, $1, i.step, $12,
	i.group_key
FROM unnest($2::uuid[], $3::text[], $4::text[], $5::int[], $6::timestamptz[], $7::int[], $8::int[],
	$9::text[], $10::bool[], $11::int[], $13::text[])
	AS i(id, queue, payload, priority, scheduled_at, max_retries, timeout_seconds, step, blocked, default_retries,
		group_key)
