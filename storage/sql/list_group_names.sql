-- name: list_group_names
-- list_group_names returns, in name order after $2, up to $3 names of queue $1's
-- groups that may have tasks or overrides: those of group_tally (only the active
-- ones, pending, claimed or executing, when $4), those with deltas not folded yet,
-- and, unless $4, those with overrides. Each source is read in its index's order
-- and stopped by LIMIT (group_tally_active_idx or group_tally's key,
-- group_tally_delta_group_idx, queue_groups' key), so a page costs its own length
-- however many groups the queue has. The caller counts the names and drops those
-- with nothing left (GroupCounts), so a page may come back shorter than $3.
--
-- Parameters:
--   $1 text: the queue
--   $2 text: the name after which to continue ('' from the start)
--   $3 int8: the most names to return
--   $4 bool: active groups only
-- Returns: group_key.
SELECT group_key FROM (
	(SELECT group_key FROM group_tally
	WHERE queue = $1 AND group_key > $2 AND NOT $4::bool
	ORDER BY group_key LIMIT $3)
	UNION
	(SELECT group_key FROM group_tally
	WHERE queue = $1 AND group_key > $2 AND $4::bool AND pending + claimed + executing > 0
	ORDER BY group_key LIMIT $3)
	UNION
	(SELECT DISTINCT group_key FROM group_tally_delta
	WHERE queue = $1 AND group_key > $2
	ORDER BY group_key LIMIT $3)
	UNION
	(SELECT group_key FROM queue_groups
	WHERE queue = $1 AND group_key > $2 AND NOT $4::bool
	ORDER BY group_key LIMIT $3)
) n
ORDER BY group_key
LIMIT $3
