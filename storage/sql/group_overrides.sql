-- name: group_overrides
-- group_overrides lists every group override of the fair queues, to mirror them
-- into Redis again after it lost its data.
--
-- Parameters: none.
-- Returns: queue, group_key, weight, max_concurrency, rate_limit, rate_burst.
SELECT g.queue, g.group_key, g.weight, g.max_concurrency, g.rate_limit, g.rate_burst
FROM queue_groups g JOIN queues q ON q.name = g.queue
WHERE q.fairness IS NOT NULL
ORDER BY g.queue, g.group_key
