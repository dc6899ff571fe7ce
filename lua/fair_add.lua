-- fair_add.lua: buffer task ids in their groups' buffers of a fair queue (the
-- dispatcher's mirror, a put-back after a failed claim). A group that had no
-- buffered work becomes ready at the level of its head, joining the turns at the
-- level's smallest pass; a ready group whose head moved to another level moves with
-- it; a parked group stays parked. Costs O(ids · log) and touches only those groups.
--
-- KEYS[1]  P: the fair key prefix (see fair_lib.lua)
-- ARGV[1]  level weight in ms (as fair_pop.lua's ARGV[9])
-- ARGV[2..] triples: group, task id, buffer score
--
-- Returns how many ids were new to their group's buffer.
local W = tonumber(ARGV[1])
if W == nil or W <= 0 or (#ARGV - 1) % 3 ~= 0 then
  return redis.error_reply('fair add: bad arguments')
end
configure(ARGV[1], nil)
local byGroup, order = {}, {}
for i = 2, #ARGV, 3 do
  local g = ARGV[i]
  local m = byGroup[g]
  if m == nil then
    m = {}
    byGroup[g] = m
    order[#order + 1] = g
  end
  if tonumber(ARGV[i + 2]) == nil then
    return redis.error_reply('fair add: bad score')
  end
  m[#m + 1] = ARGV[i + 2]
  m[#m + 1] = ARGV[i + 1]
end
local added = 0
for _, g in ipairs(order) do
  local state, ls = place(g, head(g), W)
  local m = byGroup[g]
  -- unpack is bounded by Lua's C stack: add in slices.
  for i = 1, #m, 1000 do
    added = added + redis.call('ZADD', P .. 'b:' .. g, unpack(m, i, math.min(i + 999, #m)))
  end
  settle(g, state, ls, W)
end
if added > 0 then
  redis.call('INCRBY', P .. 'n', added)
end
return added
