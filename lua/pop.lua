-- pop.lua: take up to ARGV[1] task ids from a queue's buffer, best first, within the
-- queue's flow-control limits, atomically. Time comes from Redis TIME only.
--
-- KEYS[1]  buffer:  sorted set of buffered task ids, lower score pops first
-- KEYS[2]  bucket:  hash {tokens, ts_us} of the queue's token bucket
-- KEYS[3]  running: sorted set of task ids holding a concurrency slot, scored by the
--                   Redis time (ms) they took it
-- KEYS[4]  synced:  string set once KEYS[3] has been rebuilt from PostgreSQL
-- ARGV[1]  the most ids to take (a positive integer)
-- ARGV[2]  rate limit in tokens per second; 0 = unlimited
-- ARGV[3]  bucket capacity (burst), >= 1 when ARGV[2] > 0
-- ARGV[4]  max concurrency; 0 = unlimited
-- ARGV[5]  1 when the queue is paused
--
-- Returns {status, retry_after_ms, now_us, remaining, id1, score1, id2, score2, ...}
-- where remaining is how many ids the buffer holds after the pop, and status is
--   0 ok (possibly no ids: empty buffer, no tokens or no free slot),
--   1 paused,
--   2 the running set must be rebuilt from PostgreSQL first (KEYS[4] is missing),
--   3 every concurrency slot is taken; nothing was popped.
-- retry_after_ms > 0 says when the bucket will next hold a token, when tokens (not
-- the buffer) were what ran out. now_us is the Redis time the script used.
local want = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local cap = tonumber(ARGV[4])
if want == nil or want < 1 or rate == nil or rate < 0 or burst == nil or cap == nil or cap < 0 then
  return redis.error_reply('pop: bad arguments')
end
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])

if ARGV[5] == '1' then
  return {1, 0, now_us, redis.call('ZCARD', KEYS[1])}
end

local allowed = want
if cap > 0 then
  if redis.call('EXISTS', KEYS[4]) == 0 then
    return {2, 0, now_us, redis.call('ZCARD', KEYS[1])}
  end
  allowed = math.min(allowed, cap - redis.call('ZCARD', KEYS[3]))
  if allowed <= 0 then
    return {3, 0, now_us, redis.call('ZCARD', KEYS[1])}
  end
end

local tokens = 0
if rate > 0 then
  local state = redis.call('HMGET', KEYS[2], 'tokens', 'ts_us')
  tokens = tonumber(state[1])
  local ts = tonumber(state[2])
  if tokens == nil or ts == nil then
    tokens = burst
  else
    local elapsed = math.max(0, now_us - ts)
    tokens = math.min(burst, tokens + elapsed * rate / 1000000)
  end
  allowed = math.min(allowed, math.floor(tokens))
end

local popped = {}
if allowed > 0 then
  popped = redis.call('ZPOPMIN', KEYS[1], allowed)
end

if cap > 0 and #popped > 0 then
  -- An id that already holds a slot is a stale duplicate of a task being claimed or
  -- run (the buffer repair re-added it): drop it, so that its failed claim cannot
  -- release the slot of the task that really runs. It is dropped before the bucket
  -- is charged: a duplicate hands out no work, so it spends no token.
  local now_ms = math.floor(now_us / 1000)
  local kept = {}
  for i = 1, #popped, 2 do
    if redis.call('ZADD', KEYS[3], 'NX', now_ms, popped[i]) == 1 then
      kept[#kept + 1] = popped[i]
      kept[#kept + 1] = popped[i + 1]
    end
  end
  popped = kept
end
local n = #popped / 2

local retry_after = 0
if rate > 0 then
  tokens = tokens - n
  -- %.17g round-trips a double exactly; tostring would round to 14 digits.
  redis.call('HSET', KEYS[2], 'tokens', string.format('%.17g', tokens), 'ts_us', string.format('%d', now_us))
  -- Idle buckets refill to burst in burst/rate seconds; keep them no longer than that.
  redis.call('PEXPIRE', KEYS[2], math.ceil(burst / rate * 1000) + 1000)
  if n < want and tokens < 1 and redis.call('ZCARD', KEYS[1]) > 0 then
    retry_after = math.ceil((1 - tokens) / rate * 1000)
  end
end

local out = {0, retry_after, now_us, redis.call('ZCARD', KEYS[1])}
for i = 1, #popped do
  out[#out + 1] = popped[i]
end
return out
