-- name: fold_group_tally
-- fold_group_tally moves up to $1 of the oldest group count deltas (migration 0025)
-- into group_tally, as fold_tally does for queues: DELETE ... RETURNING takes each
-- delta exactly once whatever the number of replicas folding, SKIP LOCKED lets them
-- fold different deltas at once, and the ordered upsert keeps two folders from
-- deadlocking on one group. It returns how many deltas it moved, and the groups whose
-- counts it brought back to 0 (for prune_group_tally, in the same transaction).
--
-- Parameters:
--   $1 int8: the most deltas to fold
-- Returns: folded, emptied_queues, emptied_groups.
WITH d AS (
	DELETE FROM group_tally_delta WHERE id IN (
		SELECT id FROM group_tally_delta ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
	RETURNING queue, group_key, status, delta
), sums AS (
	SELECT queue, group_key,
		coalesce(sum(delta) FILTER (WHERE status = 'pending'), 0) AS pending,
		coalesce(sum(delta) FILTER (WHERE status = 'blocked'), 0) AS blocked,
		coalesce(sum(delta) FILTER (WHERE status = 'claimed'), 0) AS claimed,
		coalesce(sum(delta) FILTER (WHERE status = 'executing'), 0) AS executing,
		coalesce(sum(delta) FILTER (WHERE status = 'retry'), 0) AS retry,
		coalesce(sum(delta) FILTER (WHERE status = 'dead'), 0) AS dead
	FROM d GROUP BY queue, group_key
), folded AS (
	INSERT INTO group_tally AS t (queue, group_key, pending, blocked, claimed, executing, retry, dead)
	SELECT queue, group_key, pending, blocked, claimed, executing, retry, dead FROM sums
	ORDER BY queue, group_key
	ON CONFLICT (queue, group_key) DO UPDATE SET
		pending = t.pending + EXCLUDED.pending, blocked = t.blocked + EXCLUDED.blocked,
		claimed = t.claimed + EXCLUDED.claimed, executing = t.executing + EXCLUDED.executing,
		retry = t.retry + EXCLUDED.retry, dead = t.dead + EXCLUDED.dead
	RETURNING queue, group_key, pending = 0 AND blocked = 0 AND claimed = 0 AND executing = 0
		AND retry = 0 AND dead = 0 AS empty
)
SELECT (SELECT count(*) FROM d) AS folded,
	coalesce(array_agg(queue) FILTER (WHERE empty), '{}') AS emptied_queues,
	coalesce(array_agg(group_key) FILTER (WHERE empty), '{}') AS emptied_groups
FROM folded
