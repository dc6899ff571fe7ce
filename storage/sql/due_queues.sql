-- name: due_queues
-- due_queues lists every unpaused queue holding a due pending or retry task: the
-- periodic sweep's one statement, at time $1 (NULL: now()). For each queue it probes,
-- priority level by level until one answers, the head of the unnamed group in
-- tasks_group_dispatch_idx and that of the named groups in tasks_named_dispatch_idx
-- (migration 0032): at most 20 short index probes per queue, whatever its backlog.
--
-- Parameters:
--   $1 timestamptz: the time (NULL: now())
-- Returns: name.
SELECT q.name FROM queues q
WHERE NOT q.paused AND EXISTS (SELECT 1 FROM generate_series(1, 10) AS level(priority)
	CROSS JOIN LATERAL (
		(SELECT 1 FROM tasks t
		WHERE t.queue = q.name AND t.status IN ('pending', 'retry') AND t.priority = level.priority
			AND t.group_key IS NULL AND t.scheduled_at <= coalesce($1::timestamptz, now())
		ORDER BY t.group_key, t.scheduled_at
		LIMIT 1)
		UNION ALL
		(SELECT 1 FROM tasks t
		WHERE t.queue = q.name AND t.status IN ('pending', 'retry') AND t.priority = level.priority
			AND t.group_key IS NOT NULL AND t.scheduled_at <= coalesce($1::timestamptz, now())
		ORDER BY t.scheduled_at
		LIMIT 1)
	) head)
