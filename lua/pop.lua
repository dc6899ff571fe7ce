-- pop.lua: take up to ARGV[1] task ids from a queue's buffer, best first.
--
-- KEYS[1]  the queue's buffer: a sorted set of task ids scored by priority, then
--          eligible time (lower is better)
-- ARGV[1]  the most ids to take (a positive integer)
--
-- Returns a flat array {id1, score1, id2, score2, ...}. The ids are hints: the caller
-- claims them in PostgreSQL, which decides whether each is still claimable.
local n = tonumber(ARGV[1])
if n == nil or n < 1 then
  return redis.error_reply('pop: ARGV[1] must be a positive integer')
end
return redis.call('ZPOPMIN', KEYS[1], n)
