-- name: due_groups
-- due_groups lists the (priority, group) pairs of a fair queue that hold waiting
-- (pending or retry) tasks, so the dispatcher can take a few of each group's head
-- rather than one group's backlog: every unnamed-group level (NULL group), then up
-- to $4 named pairs in (priority, group) order after ($2, $3). It skips from one
-- distinct pair to the next through tasks_group_dispatch_idx (a loose index scan),
-- so its cost follows the pairs it returns, never the backlog behind them. A pair
-- may hold only tasks due later (its move then takes none).
--
-- Parameters:
--   $1 text: the queue
--   $2 int4: keyset position: the priority after whose group to continue (1: from the start)
--   $3 text: keyset position: the group after which to continue ('': from the first)
--   $4 int8: the most named pairs to return
-- Returns: priority, group_key (NULL: the unnamed group).
WITH RECURSIVE named(priority, group_key) AS (
	(SELECT n.priority, n.group_key FROM (
		(SELECT priority, group_key FROM tasks
		WHERE queue = $1 AND status IN ('pending', 'retry') AND priority = $2::int4 AND group_key > $3::text
		ORDER BY group_key LIMIT 1)
		UNION ALL
		(SELECT t.priority, t.group_key FROM generate_series($2::int4 + 1, 10) AS lv(priority)
		CROSS JOIN LATERAL (
			SELECT priority, group_key FROM tasks
			WHERE queue = $1 AND status IN ('pending', 'retry') AND priority = lv.priority AND group_key IS NOT NULL
			ORDER BY group_key LIMIT 1) t)
	) n LIMIT 1)
	UNION ALL
	SELECT nxt.priority, nxt.group_key FROM named CROSS JOIN LATERAL (
		(SELECT priority, group_key FROM tasks
		WHERE queue = $1 AND status IN ('pending', 'retry') AND priority = named.priority AND group_key > named.group_key
		ORDER BY group_key LIMIT 1)
		UNION ALL
		(SELECT t.priority, t.group_key FROM generate_series(named.priority + 1, 10) AS lv(priority)
		CROSS JOIN LATERAL (
			SELECT priority, group_key FROM tasks
			WHERE queue = $1 AND status IN ('pending', 'retry') AND priority = lv.priority AND group_key IS NOT NULL
			ORDER BY group_key LIMIT 1) t)
		LIMIT 1
	) nxt
)
SELECT lv.priority, NULL::text AS group_key FROM generate_series(1, 10) AS lv(priority)
WHERE EXISTS (SELECT 1 FROM tasks WHERE queue = $1 AND status IN ('pending', 'retry') AND priority = lv.priority
	AND group_key IS NULL)
UNION ALL
(SELECT priority, group_key FROM named LIMIT $4)
