-- fair_pop.lua: take up to ARGV[1] task ids from a fair queue's group buffers,
-- atomically, within the queue's limits (pause, bucket, slots: as pop.lua) and each
-- group's (slots, bucket). Within the best level that has a ready group, the ready
-- group with the smallest pass goes next and its pass grows by 1/weight (stride
-- scheduling: weight w = w turns per round; ties go to the smaller group name). A
-- group at its cap or out of tokens is parked, not waited for: the others go on.
-- The keys (see fair_lib.lua) a call touches follow the work: O(popped + parked +
-- woken) groups, each O(log groups).
--
-- KEYS[1]  P: the fair key prefix, "<...>{q:<name>}:f:"
-- KEYS[2]  bucket:  hash {tokens, ts_us} of the queue's token bucket
-- KEYS[3]  running: sorted set of the queue's task ids holding a queue slot
-- KEYS[4]  synced:  set once slots have been rebuilt from PostgreSQL
-- ARGV[1]  the most ids to take (a positive integer)
-- ARGV[2]  queue rate limit in tokens per second; 0 = unlimited
-- ARGV[3]  queue bucket capacity (burst), >= 1 when ARGV[2] > 0
-- ARGV[4]  queue max concurrency; 0 = unlimited
-- ARGV[5]  1 when the queue is paused
-- ARGV[6]  default group max concurrency; 0 = unlimited
-- ARGV[7]  default group rate limit (tokens/s); 0 = unlimited
-- ARGV[8]  default group burst; 0 = ceil(the group's rate)
-- ARGV[9]  level weight in ms (buffer.LevelWeightMs of the queue's aging)
-- ARGV[10] the time in Unix µs to use instead of Redis TIME (tests); 0 = TIME
--
-- Returns {status, retry_after_ms, now_us (0: no clock was needed), remaining, cap_parked, rate_parked,
-- cap_overrides, id1, score1, group1, ...}; status as pop.lua's (0 ok, 1 paused, 2
-- slots must be rebuilt first, 3 every queue slot is taken); remaining counts every
-- group's buffer; cap_parked and rate_parked count the groups this call set aside at
-- their cap or out of tokens; cap_overrides is 1 when some group's overrides set a
-- cap (so its tasks' releases matter even when neither default caps), else 0;
-- retry_after_ms > 0 when tokens (the queue's, or every ready group's) are what
-- stopped the pop, and says when the next one is due.
local want = tonumber(ARGV[1])
local qrate = tonumber(ARGV[2])
local qburst = tonumber(ARGV[3])
local qcap = tonumber(ARGV[4])
local dcap = tonumber(ARGV[6])
local drate = tonumber(ARGV[7])
local dburst = tonumber(ARGV[8])
local W = tonumber(ARGV[9])
local now_us = tonumber(ARGV[10])
if want == nil or want < 1 or qrate == nil or qrate < 0 or qburst == nil or qcap == nil or qcap < 0 or
    dcap == nil or dcap < 0 or drate == nil or drate < 0 or dburst == nil or dburst < 0 or
    W == nil or W <= 0 or now_us == nil or now_us < 0 then
  return redis.error_reply('fair pop: bad arguments')
end
-- clock returns the time in Unix µs, reading Redis TIME on first use only: a pop
-- with no bucket, no slot and nothing parked needs none (and replies 0).
local function clock()
  if now_us == 0 then
    local t = redis.call('TIME')
    now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return now_us
end

-- One read for the state every pop needs: the recorded config, the override
-- counts, whether anything is parked, and how many ids are buffered.
local st0 = redis.call('MGET', P .. 'cfg', P .. 'no', P .. 'nc', P .. 'pk', P .. 'n')
local overrides = tonumber(st0[2] or '0') > 0
local capOverrides = tonumber(st0[3] or '0') > 0
local parked = st0[4] == '1'
local buffered = tonumber(st0[5] or '0')
local capFlag = 0
if capOverrides then
  capFlag = 1
end

if ARGV[5] == '1' then
  return {1, 0, now_us, buffered, 0, 0, capFlag}
end

-- Levels follow the level weight (priority aging: a change rebuilds them). When the
-- queue's group limits changed, every parked group is looked at again (O(parked
-- groups), once per change), and a group cap switched on needs the slots that were
-- not kept: rebuilt from PostgreSQL first.
local limits = ARGV[6] .. ' ' .. ARGV[7] .. ' ' .. ARGV[8]
local before, rebuilt = configure(ARGV[9], limits, st0[1])
parked = parked or rebuilt
if before ~= limits then
  if before ~= '' and dcap > 0 and tonumber(string.match(before, '^(%S+)')) == 0 then
    redis.call('DEL', KEYS[4])
  end
  for _, g in ipairs(redis.call('ZRANGE', P .. 'park', 0, -1)) do
    redis.call('ZADD', P .. 'park', 0, g)
    parked = true
  end
end

if qcap > 0 or dcap > 0 or capOverrides then
  if redis.call('EXISTS', KEYS[4]) == 0 then
    return {2, 0, now_us, buffered, 0, 0, capFlag}
  end
end

local allowed = want
if qcap > 0 then
  allowed = math.min(allowed, qcap - redis.call('ZCARD', KEYS[3]))
  if allowed <= 0 then
    return {3, 0, now_us, buffered, 0, 0, capFlag}
  end
end

local qtokens = 0
if qrate > 0 then
  local state = redis.call('HMGET', KEYS[2], 'tokens', 'ts_us')
  qtokens = tonumber(state[1])
  local ts = tonumber(state[2])
  if qtokens == nil or ts == nil then
    qtokens = qburst
  else
    qtokens = math.min(qburst, qtokens + math.max(0, clock() - ts) * qrate / 1000000)
  end
  allowed = math.min(allowed, math.floor(qtokens))
end

local cache = {}
-- settings returns group g's effective {weight, cap, rate, burst}.
local function settings(g)
  local c = cache[g]
  if c then
    return c
  end
  c = {w = 1, cap = dcap, rate = drate, burst = dburst}
  local o = overrides and redis.call('HGET', P .. 'set', g)
  if o then
    local f = {}
    for x in string.gmatch(o, '%S+') do
      f[#f + 1] = x
    end
    if f[1] and f[1] ~= '-' then c.w = tonumber(f[1]) end
    if f[2] and f[2] ~= '-' then c.cap = tonumber(f[2]) end
    if f[3] and f[3] ~= '-' then c.rate = tonumber(f[3]) end
    if f[4] and f[4] ~= '-' then c.burst = tonumber(f[4]) end
  end
  if c.rate > 0 and c.burst < 1 then
    c.burst = math.max(1, math.ceil(c.rate))
  end
  cache[g] = c
  return c
end

local out = {0, 0, 0, 0, 0, 0, capFlag}
local n, taken, cap_parked, rate_parked = 0, 0, 0, 0
if allowed > 0 and parked then
  wake(clock(), W)
end
while n < allowed do
  local lv = redis.call('ZRANGE', P .. 'levels', 0, 0)
  if #lv == 0 then
    break
  end
  local ls = lv[1]
  local key = P .. 'lv:' .. ls
  -- The first two: a group alone at its level need not advance its pass.
  local first = redis.call('ZRANGE', key, 0, 1, 'WITHSCORES')
  if #first == 0 then
    redis.call('ZREM', P .. 'levels', ls)
  else
    local g, pass = first[1], tonumber(first[2])
    local st = settings(g)
    local blocked = false
    local held = 0
    if st.cap > 0 then
      held = redis.call('ZCARD', P .. 'r:' .. g)
      if held >= st.cap then
        park(g, ls, pass, AT_CAP)
        cap_parked = cap_parked + 1
        blocked = true
      end
    end
    local tokens = 0
    local bkey = P .. 'k:' .. g
    if not blocked and st.rate > 0 then
      local state = redis.call('HMGET', bkey, 'tokens', 'ts_us')
      tokens = tonumber(state[1])
      local ts = tonumber(state[2])
      if tokens == nil or ts == nil then
        tokens = st.burst
      else
        tokens = math.min(st.burst, tokens + math.max(0, clock() - ts) * st.rate / 1000000)
      end
      if tokens < 1 then
        park(g, ls, pass, clock() + math.max(1, math.ceil((1 - tokens) / st.rate * 1000000)))
        rate_parked = rate_parked + 1
        blocked = true
      end
    end
    if not blocked then
      -- One turn takes one id. A group alone at its level takes every turn until
      -- its head leaves the level or a limit stops it, so it takes them at once:
      -- up to the room left under its cap and its whole tokens, in one ZPOPMIN
      -- (ids past the level go back). The same ids, in the same order, as one at a
      -- time.
      local k = 1
      if #first == 2 then
        k = allowed - n
        if st.cap > 0 then
          k = math.min(k, st.cap - held)
        end
        if st.rate > 0 then
          k = math.min(k, math.floor(tokens))
        end
      end
      local e = redis.call('ZPOPMIN', P .. 'b:' .. g, k)
      local got = 0
      for i = 1, #e, 2 do
        local id = e[i]
        if i > 1 then
          local _, els = level_of(e[i + 1], W)
          if els ~= ls then
            -- Past the level: back in the buffer, with the rest.
            local back = {}
            for x = i, #e, 2 do
              back[#back + 1] = e[x + 1]
              back[#back + 1] = e[x]
            end
            redis.call('ZADD', P .. 'b:' .. g, unpack(back))
            break
          end
        end
        taken = taken + 1
        -- An id that already holds a slot is a stale duplicate (see pop.lua): dropped
        -- before anything is charged.
        local dup = false
        if qcap > 0 and redis.call('ZADD', KEYS[3], 'NX', math.floor(clock() / 1000), id) == 0 then
          dup = true
        end
        if not dup and st.cap > 0 then
          if redis.call('ZADD', P .. 'r:' .. g, 'NX', math.floor(clock() / 1000), id) == 0 then
            dup = true
            if qcap > 0 then
              redis.call('ZREM', KEYS[3], id)
            end
          else
            redis.call('SADD', P .. 'rg', g)
          end
        end
        if not dup then
          n = n + 1
          got = got + 1
          out[#out + 1] = id
          out[#out + 1] = e[i + 1]
          out[#out + 1] = g
        end
      end
      if got > 0 then
        if st.rate > 0 then
          redis.call('HSET', bkey, 'tokens', fmt(tokens - got), 'ts_us', string.format('%.0f', clock()))
          if ARGV[10] == '0' then
            -- An idle bucket refills to burst in burst/rate s: keep it no longer. (Not
            -- under a test clock: the expiry would run on Redis's own.)
            redis.call('PEXPIRE', bkey, math.ceil(st.burst / st.rate * 1000) + 1000)
          end
        end
        pass = pass + got / st.w
      end
      local s = head(g)
      if s == nil then
        unready(g, ls)
        emptied()
      else
        local _, nls = level_of(s, W)
        if nls == ls then
          if #first > 2 then
            redis.call('ZADD', key, pass, g)
          end
        else
          unready(g, ls)
          join(g, W, pass)
        end
      end
    end
  end
end

local left
if taken > 0 then
  left = redis.call('DECRBY', P .. 'n', taken)
  if left <= 0 then
    redis.call('DEL', P .. 'n')
    left = 0
  end
else
  left = buffered
end

local retry_after = 0
if qrate > 0 then
  qtokens = qtokens - n
  redis.call('HSET', KEYS[2], 'tokens', fmt(qtokens), 'ts_us', string.format('%.0f', clock()))
  if ARGV[10] == '0' then
    redis.call('PEXPIRE', KEYS[2], math.ceil(qburst / qrate * 1000) + 1000)
  end
  if n < want and qtokens < 1 and left > 0 then
    retry_after = math.ceil((1 - qtokens) / qrate * 1000)
  end
end
if n < want and left > 0 and redis.call('EXISTS', P .. 'levels') == 0 then
  -- Every group with work is parked: the earliest rate wake-up, if any, is the hint.
  local p = redis.call('ZRANGE', P .. 'park', 0, 0, 'WITHSCORES')
  if #p > 0 and tonumber(p[2]) < AT_CAP then
    retry_after = math.max(retry_after, math.ceil((tonumber(p[2]) - clock()) / 1000))
  end
end
out[2] = retry_after
out[3] = now_us
out[4] = left
out[5] = cap_parked
out[6] = rate_parked
return out
