-- fair_remove.lua: delete task ids from their groups' buffers of a fair queue (a
-- cancel, a delete): a group left without buffered work leaves every structure, a
-- ready group whose head moved to another level moves with it.
--
-- KEYS[1]  P: the fair key prefix (see fair_lib.lua)
-- ARGV[1]  level weight in ms (as fair_pop.lua's ARGV[9])
-- ARGV[2..] pairs: group, task id
--
-- Returns how many ids were removed.
local W = tonumber(ARGV[1])
if W == nil or W <= 0 or (#ARGV - 1) % 2 ~= 0 then
  return redis.error_reply('fair remove: bad arguments')
end
configure(ARGV[1], nil)
local byGroup, order = {}, {}
for i = 2, #ARGV, 2 do
  local g = ARGV[i]
  if byGroup[g] == nil then
    byGroup[g] = {}
    order[#order + 1] = g
  end
  local m = byGroup[g]
  m[#m + 1] = ARGV[i + 1]
end
local removed = 0
for _, g in ipairs(order) do
  local state, ls = place(g, head(g), W)
  local m = byGroup[g]
  for i = 1, #m, 1000 do
    removed = removed + redis.call('ZREM', P .. 'b:' .. g, unpack(m, i, math.min(i + 999, #m)))
  end
  settle(g, state, ls, W)
end
if removed > 0 and redis.call('DECRBY', P .. 'n', removed) <= 0 then
  redis.call('DEL', P .. 'n')
end
return removed
