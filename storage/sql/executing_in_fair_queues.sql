-- name: executing_in_fair_queues
-- executing_in_fair_queues lists every fair queue (fairness set) that has a cap, the
-- queue's, its groups' default or a group's override, with its executing tasks and
-- their groups (one row with a NULL id for a queue with none), to rebuild the
-- queue's and the groups' slots; bounded by the executing tasks of those queues.
--
-- Parameters: none.
-- Returns: name, group_key, id (group_key '' for the unnamed group; id NULL when none
--   executes).
SELECT q.name, coalesce(t.group_key, '') AS group_key, t.id
FROM queues q LEFT JOIN tasks t ON t.queue = q.name AND t.status = 'executing'
WHERE q.fairness IS NOT NULL AND (q.max_concurrency IS NOT NULL OR q.group_max_concurrency IS NOT NULL
	OR EXISTS (SELECT 1 FROM queue_groups g WHERE g.queue = q.name AND g.max_concurrency IS NOT NULL))
