-- name: group_counts
-- group_counts sums the totals and the deltas not folded yet of the groups $2 of queue
-- $1 (migration 0025): one probe of group_tally's key and of
-- group_tally_delta_group_idx per group, whatever the number of tasks. A group without
-- unfinished or dead tasks has no row.
--
-- Parameters:
--   $1 text: the queue
--   $2 text[]: the groups
-- Returns: group_key, pending, blocked, claimed, executing, retry, dead.
SELECT c.group_key, sum(c.pending)::int8 AS pending, sum(c.blocked)::int8 AS blocked,
	sum(c.claimed)::int8 AS claimed, sum(c.executing)::int8 AS executing,
	sum(c.retry)::int8 AS retry, sum(c.dead)::int8 AS dead
FROM (
	SELECT group_key, pending, blocked, claimed, executing, retry, dead FROM group_tally
	WHERE queue = $1 AND group_key = ANY($2::text[])
	UNION ALL
	SELECT group_key,
		CASE WHEN status = 'pending' THEN delta ELSE 0 END,
		CASE WHEN status = 'blocked' THEN delta ELSE 0 END,
		CASE WHEN status = 'claimed' THEN delta ELSE 0 END,
		CASE WHEN status = 'executing' THEN delta ELSE 0 END,
		CASE WHEN status = 'retry' THEN delta ELSE 0 END,
		CASE WHEN status = 'dead' THEN delta ELSE 0 END
	FROM group_tally_delta WHERE queue = $1 AND group_key = ANY($2::text[])
) c
GROUP BY c.group_key
HAVING sum(c.pending) <> 0 OR sum(c.blocked) <> 0 OR sum(c.claimed) <> 0 OR sum(c.executing) <> 0
	OR sum(c.retry) <> 0 OR sum(c.dead) <> 0
