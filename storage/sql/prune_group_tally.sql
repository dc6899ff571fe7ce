-- name: prune_group_tally
-- prune_group_tally deletes the counts of the groups fold_group_tally brought back to
-- 0, when they are still 0, so that group_tally holds only groups with unfinished or
-- dead tasks.
--
-- Parameters:
--   $1 text[]: the queue of each group
--   $2 text[]: the group_key of each group
-- Returns: no rows.
DELETE FROM group_tally g USING unnest($1::text[], $2::text[]) AS e(queue, group_key)
WHERE g.queue = e.queue AND g.group_key = e.group_key AND g.pending = 0 AND g.blocked = 0
	AND g.claimed = 0 AND g.executing = 0 AND g.retry = 0 AND g.dead = 0
