-- name: end_workflow
-- end_workflow sets workflow $1's status to $2 and stamps finished_at.
--
-- Parameters:
--   $1 uuid: the workflow
--   $2 text: the new status
-- Returns: no rows.
UPDATE workflows SET status = $2, finished_at = now(), updated_at = now() WHERE id = $1
