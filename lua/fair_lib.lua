-- fair_lib.lua: helpers shared by the fair-queue scripts (fair_*.lua), prepended to
-- each of them. A fair queue's keys all start with one prefix P = "<...>{q:<name>}:f:"
-- (the queue's hash tag, so every key of one call lies in one Redis Cluster slot):
--
--   P.."b:"..g    sorted set: group g's buffered task ids, scored as the plain buffer
--   P.."r:"..g    sorted set: g's task ids holding a group slot, scored by Redis ms
--   P.."k:"..g    hash {tokens, ts_us}: g's token bucket (expires when idle)
--   P.."levels"   sorted set: levels that have ready groups, member = score = level
--   P.."lv:"..L   sorted set: the ready groups whose head is at level L, scored by pass
--   P.."pass"     hash: group -> pass (virtual time) of each parked group (a ready
--                 group's pass is its score in lv:<level>)
--   P.."park"     sorted set: groups with buffered work set aside, scored by the Redis
--                 time (µs) to look at them again: a token is due, or AT_CAP (at its cap:
--                 a release sets it to 0)
--   P.."set"      hash: group -> "weight cap rate burst" overrides ("-" = the queue's
--                 default)
--   P.."no", P.."nc"  strings: how many groups have overrides, and overrides with a cap
--   P.."pk"       string: "1" whenever P.."park" may hold a group (so that a pop
--                 skips the park when it is surely empty)
--   P.."rg"       set: groups whose slot set is not empty (for reconcile)
--   P.."n"        string: how many ids all group buffers hold
--   P.."ng"       string: how many groups have buffered work
--   P.."em"       string: how many times a group's buffer went empty (the dispatcher's
--                 sweep leaves a fair queue alone while it stands still)
--   P.."cfg"      string: "<level weight> <group limits>" the structures were built with
--
-- A group is in exactly one of three states: absent (no buffered work: it owns no
-- key but, perhaps, its slots and an expiring bucket), ready (in lv:<level of its head>)
-- or parked. A group's level is floor(head score / level weight): its priority under
-- strict priority, its aged priority band under priority aging.

local P = KEYS[1]

-- AT_CAP is the park score of a group at its cap: no time wakes it, a release does.
local AT_CAP = 9007199254740991 -- 2^53 - 1 µs: year 2255; prints without an exponent

-- level_of returns the level of a buffer score and its key suffix.
local function level_of(score, weight)
  local l = math.floor(tonumber(score) / weight)
  return l, string.format('%.0f', l)
end

-- head returns group g's best score, or nil when its buffer is empty.
local function head(g)
  local h = redis.call('ZRANGE', P .. 'b:' .. g, 0, 0, 'WITHSCORES')
  if #h == 0 then
    return nil
  end
  return tonumber(h[2])
end

local function fmt(x)
  -- %.17g round-trips a double exactly; tostring would round to 14 digits.
  return string.format('%.17g', x)
end

-- unready removes group g from level ls (it is ready there) and the level from the
-- index when it was the last group.
local function unready(g, ls)
  local key = P .. 'lv:' .. ls
  redis.call('ZREM', key, g)
  if redis.call('ZCARD', key) == 0 then
    redis.call('ZREM', P .. 'levels', ls)
  end
end

-- join makes group g ready at the level of its head, at pass (nil: the pass it was
-- parked with, if any) or the level's smallest pass, whichever is larger: a group that
-- (re)joins gets neither a burst of saved turns nor starves the groups already there.
local function join(g, weight, pass)
  if pass == nil then
    pass = tonumber(redis.call('HGET', P .. 'pass', g))
    if pass ~= nil then
      redis.call('HDEL', P .. 'pass', g)
    end
  end
  local s = head(g)
  if s == nil then
    return
  end
  local l, ls = level_of(s, weight)
  local key = P .. 'lv:' .. ls
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #first > 0 then
    local m = tonumber(first[2])
    if pass == nil or pass < m then
      pass = m
    end
  elseif pass == nil then
    pass = 0
  end
  redis.call('ZADD', key, pass, g)
  redis.call('ZADD', P .. 'levels', l, ls)
end

-- park sets ready group g (at level ls, with pass) aside until the Redis time at.
local function park(g, ls, pass, at)
  unready(g, ls)
  redis.call('HSET', P .. 'pass', g, fmt(pass))
  redis.call('ZADD', P .. 'park', at, g)
  redis.call('SET', P .. 'pk', '1')
end

-- place returns where group g is: 'ready' and its level key suffix, 'parked', or
-- 'absent'. old is g's head score before the change being applied (nil: was empty).
local function place(g, old, weight)
  if old == nil then
    return 'absent'
  end
  if redis.call('ZSCORE', P .. 'park', g) then
    return 'parked'
  end
  local _, ls = level_of(old, weight)
  return 'ready', ls
end

-- emptied counts a group whose buffer just went empty: one group fewer with
-- buffered work, one more emptying.
local function emptied()
  if redis.call('DECR', P .. 'ng') <= 0 then
    redis.call('DEL', P .. 'ng')
  end
  redis.call('INCR', P .. 'em')
end

-- settle puts group g where its new buffer says, given where it was (state, ls), and
-- keeps the count of groups with buffered work.
local function settle(g, state, ls, weight)
  local s = head(g)
  if state == 'absent' then
    if s ~= nil then
      redis.call('INCR', P .. 'ng')
      join(g, weight, nil)
    end
    return
  end
  if s == nil then
    emptied()
  end
  if state == 'parked' then
    if s == nil then
      redis.call('ZREM', P .. 'park', g)
      redis.call('HDEL', P .. 'pass', g)
    end
    return
  end
  if s ~= nil then
    local _, nls = level_of(s, weight)
    if nls == ls then
      return
    end
  end
  local pass = tonumber(redis.call('ZSCORE', P .. 'lv:' .. ls, g))
  unready(g, ls)
  if s ~= nil then
    join(g, weight, pass)
  end
end

-- wake makes every parked group ready whose time has come (score <= upto).
local function wake(upto, weight)
  local due = redis.call('ZRANGEBYSCORE', P .. 'park', '-inf', upto)
  for _, g in ipairs(due) do
    redis.call('ZREM', P .. 'park', g)
    join(g, weight, nil)
  end
  if redis.call('ZCARD', P .. 'park') == 0 then
    redis.call('DEL', P .. 'pk')
  end
  return #due
end

-- rebuild parks every ready group for an immediate wake, so that the next wake places
-- them again at fresh levels (after the queue's priority aging changed): O(groups with
-- buffered work), once per change.
local function rebuild()
  local levels = redis.call('ZRANGE', P .. 'levels', 0, -1)
  for _, ls in ipairs(levels) do
    local key = P .. 'lv:' .. ls
    local ready = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
    for i = 1, #ready, 2 do
      redis.call('HSET', P .. 'pass', ready[i], ready[i + 1])
      redis.call('ZADD', P .. 'park', 0, ready[i])
      redis.call('SET', P .. 'pk', '1')
    end
    redis.call('DEL', key)
  end
  redis.call('DEL', P .. 'levels')
end

-- configure records the level weight ws (an ARGV string) and, from fair_pop.lua, the
-- group limits (nil: keep them) the structures are built with, in P.."cfg" =
-- "weight limits": levels are rebuilt when the weight changed. old is P.."cfg" when
-- the caller read it already (false: missing). Returns the limits recorded before
-- ('' when none) and whether the levels were rebuilt (every group is parked, to wake).
local function configure(ws, limits, old)
  if old == nil then
    old = redis.call('GET', P .. 'cfg')
  end
  local want = ws .. ' ' .. (limits or '')
  if old == want then
    return limits, false
  end
  local ow, ol = '', ''
  if old == false then
    old = nil
  end
  if old then
    ow, ol = string.match(old, '^(%S+) ?(.*)$')
  end
  local rebuilt = false
  if old and ow ~= ws then
    rebuild()
    rebuilt = true
  end
  redis.call('SET', P .. 'cfg', ws .. ' ' .. (limits or ol))
  return ol, rebuilt
end
