-- name: insert_workflow_steps
--
-- Parameters:
--   $1 uuid: the workflow
--   $2 text[]: the step of each row
--   $3 int[]: the ord of each row
--   $4 text[]: each step's dependencies, comma-separated
--   $5 uuid[]: the task_id of each row
-- Returns: no rows.
INSERT INTO workflow_steps (workflow_id, step, ord, depends_on, task_id, waiting_on)
SELECT $1, i.step, i.ord, coalesce(string_to_array(i.deps, ','), '{}'), i.task_id,
	cardinality(coalesce(string_to_array(i.deps, ','), '{}'))
FROM unnest($2::text[], $3::int[], $4::text[], $5::uuid[]) AS i(step, ord, deps, task_id)
