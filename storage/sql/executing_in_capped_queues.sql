-- name: executing_in_capped_queues
-- executing_in_capped_queues lists the executing tasks of every plain queue with a
-- concurrency cap, to rebuild the slots; bounded by the caps' sum. Fair queues have
-- their own (executing_in_fair_queues).
--
-- Parameters: none.
-- Returns: name, coalesce.
SELECT q.name, coalesce(array_agg(t.id) FILTER (WHERE t.id IS NOT NULL), '{}')
FROM queues q LEFT JOIN tasks t ON t.queue = q.name AND t.status = 'executing'
WHERE q.max_concurrency IS NOT NULL AND q.fairness IS NULL
GROUP BY q.name
