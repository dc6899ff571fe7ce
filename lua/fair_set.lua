-- fair_set.lua: set or clear one group's overrides of a fair queue's defaults (the
-- mirror of PostgreSQL's per-group settings). The group, if parked, is looked at
-- again by the next pop; a cap switched on forgets that slots are in sync, since they
-- were not kept for the group (the next pop asks for a rebuild).
--
-- KEYS[1]  P: the fair key prefix (see fair_lib.lua)
-- KEYS[2]  synced: the queue's marker that slots match PostgreSQL
-- ARGV[1]  group
-- ARGV[2]  "weight cap rate burst", "-" for each the queue's default; "" clears them
--
-- Returns 1 when the overrides changed, else 0.
local g, v = ARGV[1], ARGV[2]
if g == nil or v == nil then
  return redis.error_reply('fair set: bad arguments')
end
local function capOf(s)
  if not s then
    return nil
  end
  local f = {}
  for x in string.gmatch(s, '%S+') do
    f[#f + 1] = x
  end
  if f[2] == nil or f[2] == '-' then
    return nil
  end
  return f[2]
end
local old = redis.call('HGET', P .. 'set', g)
if v == '' then
  if not old then
    return 0
  end
  redis.call('HDEL', P .. 'set', g)
  v = nil
else
  if old == v then
    return 0
  end
  redis.call('HSET', P .. 'set', g, v)
end
if old and not v then
  redis.call('DECR', P .. 'no')
elseif v and not old then
  redis.call('INCR', P .. 'no')
end
local oc, nc = capOf(old), capOf(v)
if oc and not nc then
  redis.call('DECR', P .. 'nc')
elseif nc and not oc then
  redis.call('INCR', P .. 'nc')
  redis.call('DEL', KEYS[2])
end
redis.call('ZADD', P .. 'park', 'XX', 0, g)
return 1
