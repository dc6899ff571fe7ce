-- name: resume_workflow
-- resume_workflow makes workflow $1 run again with $2 steps not done.
--
-- Parameters:
--   $1 uuid: the workflow
--   $2 int4: the new steps_left: steps not done
-- Returns: no rows.
UPDATE workflows SET status = 'running', finished_at = NULL, steps_left = $2,
	generation = generation + 1, updated_at = now()
WHERE id = $1
