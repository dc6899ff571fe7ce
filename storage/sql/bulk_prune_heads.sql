-- name: bulk_prune_heads
-- bulk_prune_heads reads the heads of queue $1 as the dispatcher does (each priority's
-- first due task in tasks_dispatch_idx) and as the sweep does (due_queues' probe of
-- tasks_queue_due_idx), after a batch of a bulk cancel: its scans step over the index
-- entries the batch left dead and mark them so (PostgreSQL's kill_prior_tuple), so the
-- dispatcher's own scans, which run on the loop that serves every queue of a replica,
-- never step over more than a batch of them. It changes nothing.
--
-- Parameters:
--   $1 text: the queue
-- Returns: count, exists.
SELECT
	(SELECT count(*) FROM generate_series(1, 10) AS level(priority) CROSS JOIN LATERAL (
		SELECT 1 FROM tasks WHERE queue = $1 AND status IN ('pending', 'retry') AND priority = level.priority
			AND scheduled_at <= now()
		ORDER BY scheduled_at LIMIT 1) head),
	EXISTS (SELECT 1 FROM tasks WHERE queue = $1 AND status IN ('pending', 'retry') AND priority > 0
		AND scheduled_at <= now())
