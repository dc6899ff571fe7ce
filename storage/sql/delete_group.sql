-- name: delete_group
-- delete_group forgets a group's overrides (its tasks stay).
--
-- Parameters:
--   $1 text: the queue
--   $2 text: the group_key
-- Returns: group_key.
DELETE FROM queue_groups WHERE queue = $1 AND group_key = $2 RETURNING group_key
