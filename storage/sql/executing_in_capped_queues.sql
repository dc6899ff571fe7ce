-- name: executing_in_capped_queues
-- executing_in_capped_queues lists the executing tasks of every queue with a
-- concurrency cap, to rebuild the slots; bounded by the caps' sum.
--
-- Parameters: none.
-- Returns: name, coalesce.
SELECT q.name, coalesce(array_agg(t.id) FILTER (WHERE t.id IS NOT NULL), '{}')
FROM queues q LEFT JOIN tasks t ON t.queue = q.name AND t.status = 'executing'
WHERE q.max_concurrency IS NOT NULL
GROUP BY q.name
