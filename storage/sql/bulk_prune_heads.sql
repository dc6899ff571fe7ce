-- name: bulk_prune_heads
-- bulk_prune_heads reads the heads of queue $1 as the dispatcher and the sweep do
-- (per priority level, the unnamed group's first due task in tasks_group_dispatch_idx
-- and the named groups' in tasks_named_dispatch_idx, migration 0032), after a batch of
-- a bulk cancel: its scans step over the index entries the batch left dead and mark
-- them so (PostgreSQL's kill_prior_tuple), so the dispatcher's own scans, which run on
-- the loop that serves every queue of a replica, never step over more than a batch of
-- them. It changes nothing.
--
-- Parameters:
--   $1 text: the queue
-- Returns: count.
SELECT count(*) FROM generate_series(1, 10) AS level(priority) CROSS JOIN LATERAL (
	(SELECT 1 FROM tasks WHERE queue = $1 AND status IN ('pending', 'retry') AND priority = level.priority
		AND group_key IS NULL AND scheduled_at <= now()
	ORDER BY group_key, scheduled_at LIMIT 1)
	UNION ALL
	(SELECT 1 FROM tasks WHERE queue = $1 AND status IN ('pending', 'retry') AND priority = level.priority
		AND group_key IS NOT NULL AND scheduled_at <= now()
	ORDER BY scheduled_at LIMIT 1)
) head
