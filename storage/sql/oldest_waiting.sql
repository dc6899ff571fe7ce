-- name: oldest_waiting
-- oldest_waiting is, for each queue of $1, the age in seconds of its oldest task that
-- is due and not yet running: the earliest of its due pending and retry tasks (per
-- priority level, the unnamed group's head in tasks_group_dispatch_idx and the named
-- groups' in tasks_named_dispatch_idx, migration 0032: 20 probes) or its oldest
-- buffered task (bounded by the buffer's size), whichever is older.
--
-- Parameters:
--   $1 text[]: the queues
-- Returns: name, extract.
SELECT q.name, extract(epoch FROM now() - least(
	(SELECT min(head.scheduled_at) FROM generate_series(1, 10) AS level(priority)
	CROSS JOIN LATERAL (
		(SELECT scheduled_at FROM tasks
		WHERE queue = q.name AND status IN ('pending', 'retry') AND priority = level.priority
			AND group_key IS NULL AND scheduled_at <= now()
		ORDER BY group_key, scheduled_at
		LIMIT 1)
		UNION ALL
		(SELECT scheduled_at FROM tasks
		WHERE queue = q.name AND status IN ('pending', 'retry') AND priority = level.priority
			AND group_key IS NOT NULL AND scheduled_at <= now()
		ORDER BY scheduled_at
		LIMIT 1)
	) head),
	(SELECT min(scheduled_at) FROM tasks WHERE queue = q.name AND status = 'claimed'
		AND scheduled_at <= now())))::float8
FROM unnest($1::text[]) AS q(name)
