-- name: executing_group_slots
-- executing_group_slots lists a fair queue's executing tasks with their groups, to
-- rebuild its queue and group slots.
--
-- Parameters:
--   $1 text: the queue
-- Returns: group_key, id (group_key '' for the unnamed group).
SELECT coalesce(group_key, '') AS group_key, id FROM tasks WHERE queue = $1 AND status = 'executing'
