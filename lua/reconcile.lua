-- reconcile.lua: bring a queue's concurrency slots in line with PostgreSQL.
--
-- KEYS[1]  running: sorted set of task ids holding a slot, scored by Redis time (ms)
-- KEYS[2]  synced:  set by this script; pop.lua refuses to pop without it
-- ARGV[1]  grace in ms: a slot younger than this is kept even if PostgreSQL does not
--          show its task executing yet (it may be between pop and claim)
-- ARGV[2..] ids of the queue's tasks that PostgreSQL shows executing
--
-- Adds a slot for every executing task that lacks one, frees slots older than the
-- grace whose task is not executing (a crash between pop and claim, a lost release),
-- and marks the set synced. Returns {added, removed}.
local grace = tonumber(ARGV[1])
if grace == nil or grace < 0 then
  return redis.error_reply('reconcile: bad grace')
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local executing = {}
local added = 0
for i = 2, #ARGV do
  executing[ARGV[i]] = true
  added = added + redis.call('ZADD', KEYS[1], 'NX', now_ms, ARGV[i])
end

local removed = 0
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms - grace)
for _, id in ipairs(old) do
  if not executing[id] then
    removed = removed + redis.call('ZREM', KEYS[1], id)
  end
end
redis.call('SET', KEYS[2], '1')
return {added, removed}
