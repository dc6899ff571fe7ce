-- fair_release.lua: free the slots that tasks of a fair queue hold, in the queue's
-- set and their group's (ack, nack, a reclaim, a failed claim). A group parked at its
-- cap that got a slot back is looked at again by the next pop.
--
-- KEYS[1]  P: the fair key prefix (see fair_lib.lua)
-- KEYS[2]  running: the queue's slot set
-- ARGV     pairs: group, task id
--
-- Returns how many group slots were freed.
if #ARGV % 2 ~= 0 then
  return redis.error_reply('fair release: bad arguments')
end
local freed = 0
for i = 1, #ARGV, 2 do
  local g, id = ARGV[i], ARGV[i + 1]
  redis.call('ZREM', KEYS[2], id)
  local key = P .. 'r:' .. g
  if redis.call('ZREM', key, id) == 1 then
    freed = freed + 1
    redis.call('ZADD', P .. 'park', 'XX', 0, g)
    if redis.call('ZCARD', key) == 0 then
      redis.call('SREM', P .. 'rg', g)
    end
  end
end
return freed
