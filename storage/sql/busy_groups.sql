-- name: busy_groups
-- busy_groups returns, busiest first, up to $4 of queue $1's groups with unfinished
-- or dead tasks after the position ($2, $3): by pending + claimed + executing tasks
-- as last folded into group_tally (so at most one fold, about a second, behind the
-- exact counts), most first, then by name. It reads group_tally_busy_idx (migration
-- 0026) in its order and stops at the LIMIT, so a page costs its own length however
-- many groups the queue has. The caller reads the exact counts of the page's groups
-- (GroupCounts).
--
-- Parameters:
--   $1 text: the queue
--   $2 int8: the negated busy count of the position to continue after (from the
--      start: the smallest int8)
--   $3 text: the group name of that position ('' from the start)
--   $4 int8: the most groups to return
-- Returns: group_key, busy.
SELECT group_key, pending + claimed + executing AS busy
FROM group_tally
WHERE queue = $1 AND (-(pending + claimed + executing), group_key) > ($2::int8, $3::text)
ORDER BY -(pending + claimed + executing), group_key
LIMIT $4
