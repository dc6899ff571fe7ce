-- fair_reconcile.lua: bring a fair queue's slots, the queue's and every group's, in
-- line with PostgreSQL (reconcile.lua for groups). Costs follow the executing tasks
-- and the groups holding slots, never all groups.
--
-- KEYS[1]  P: the fair key prefix (see fair_lib.lua)
-- KEYS[2]  running: the queue's slot set
-- KEYS[3]  synced: set by this script; fair_pop.lua refuses to pop without it when a
--          cap is on
-- ARGV[1]  grace in ms: a slot younger than this is kept even if PostgreSQL does not
--          show its task executing yet (it may be between pop and claim)
-- ARGV[2]  the time in Unix ms to use instead of Redis TIME (tests); 0 = TIME
-- ARGV[3..] pairs: group, id of each task PostgreSQL shows executing
--
-- Returns {added, removed} (slots of the queue's set), {group slots added, removed}.
local grace = tonumber(ARGV[1])
local now_ms = tonumber(ARGV[2])
if grace == nil or grace < 0 or now_ms == nil or now_ms < 0 or #ARGV % 2 ~= 0 then
  return redis.error_reply('fair reconcile: bad arguments')
end
if now_ms == 0 then
  local t = redis.call('TIME')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local executing = {}
local added, gadded = 0, 0
for i = 3, #ARGV, 2 do
  local g, id = ARGV[i], ARGV[i + 1]
  executing[id] = g
  added = added + redis.call('ZADD', KEYS[2], 'NX', now_ms, id)
  gadded = gadded + redis.call('ZADD', P .. 'r:' .. g, 'NX', now_ms, id)
  redis.call('SADD', P .. 'rg', g)
end

local removed = 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now_ms - grace)) do
  if executing[id] == nil then
    removed = removed + redis.call('ZREM', KEYS[2], id)
  end
end
local gremoved = 0
for _, g in ipairs(redis.call('SMEMBERS', P .. 'rg')) do
  local key = P .. 'r:' .. g
  local freed = 0
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', key, '-inf', now_ms - grace)) do
    if executing[id] ~= g then
      freed = freed + redis.call('ZREM', key, id)
    end
  end
  if freed > 0 then
    gremoved = gremoved + freed
    redis.call('ZADD', P .. 'park', 'XX', 0, g)
  end
  if redis.call('ZCARD', key) == 0 then
    redis.call('SREM', P .. 'rg', g)
  end
end
redis.call('SET', KEYS[3], '1')
return {added, removed, gadded, gremoved}
