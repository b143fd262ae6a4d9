-- Lends allowances out of one key's fixed or sliding window state (see
-- DESIGN-allowances.md, sections 2.4 and 3). The twin of allowance.lua for
-- the window algorithms: same arguments, same answer.
--
-- KEYS[1] is the state key. ARGV[1] is fourteen signed 64-bit
-- little-endian integers (read with struct.unpack, as allow.lua's; any
-- that follow are not read):
--   op alg limit n p w now seq used spent_at want lease need held
-- op: 1 take or renew, 2 return. alg: 3 fixed, 5 sliding window. now: µs,
-- or -1 for the server's TIME. seq: the holder's lease (0: none). used:
-- units spent under it since the last report; spent_at: a time at or after
-- the last of those spends (-1: now), which only tells whether a report on
-- a lease the state does not hold can concern this window.
-- want: units asked for. lease: µs. need: the cost of the decision waiting
-- for this call (0: none): when the holder's remainder and the grant cannot
-- cover it, nothing is granted, the remainder is given back, and the answer
-- is the one-trip denial of that cost. held: the holder's remainder when it
-- sent the call (-1: not known); the lease is cut to it, the rest given
-- back. ARGV[2] is the holder's id.
--
-- The state is "<window> <count>" (fixed) or "<window> <count> <previous>"
-- (sliding) as in limit.lua, followed, while anything is lent in the
-- current window, by " L" and one "holder:amount:lease_end:seq" item per
-- lease. A granted unit counts in the window's count at once; a lease never
-- outlives its window. A return takes the unspent amount off the count
-- while the window lasts; a lease that ends unreported only leaves the
-- ledger (its units stay counted), and a window that ends takes every lease
-- with it.
--
-- The answer: "granted seq lease_us holders retry_us remaining reset_us now
-- matched", as allowance.lua's.

local SLIDING = 5

local function idiv(a, b)
  local q = math.floor(a / b)
  -- From 2^52 on a double has no room for the unit steps below (q + 1
  -- can equal q, and they would never end), nor has an infinity: such a
  -- quotient is returned as it is.
  if not (q > -4503599627370496 and q < 4503599627370496) then return q end
  while q * b > a do q = q - 1 end
  while (q + 1) * b <= a do q = q + 1 end
  return q
end

local op, alg, limit, _, _, w, now, seq, used, spent_at, want, lease, need, held =
  struct.unpack('<i8i8i8i8i8i8i8i8i8i8i8i8i8i8', ARGV[1])
-- No lease holds more than the limit, so no report of its spends is more
-- (see allowance.lua).
used = math.max(0, math.min(used, limit))
local holder = ARGV[2]
local slack = 3600000
if now < 0 then
  local t = redis.call('TIME')
  now, slack = tonumber(t[1]) * 1000000 + tonumber(t[2]), 0
end

-- Load: the stored window a, its count b, the previous window's count c.
local a, b, c = 0, 0, 0
local tail
local v = redis.call('GET', KEYS[1])
if v then
  local base, rest = string.match(v, '^(.-) L (.*)$')
  if not base then base = v end
  tail = rest
  local x = {0, 0, 0}
  local i = 1
  for f in string.gmatch(base, '%S+') do x[i] = tonumber(f); i = i + 1 end
  a, b, c = x[1], x[2], x[3]
end

-- The window decided in: now's, or the stored one if now is behind it.
local id, t = idiv(now, w), now
if id < a then id, t = a, a * w end
local cur, prev = 0, 0
if id == a then
  cur, prev = b, c
elseif alg == SLIDING and id == a + 1 then
  prev = b
end
local e = t - id * w -- elapsed in the window
local wend = (id + 1) * w

-- The ledger of the current window; leases that ended leave it, their
-- units counted.
local ledger = {}
if tail and id == a then
  for h, amt, le, s in string.gmatch(tail, '([^:%s]+):(%d+):(%d+):(%d+)') do
    le = tonumber(le)
    if le > t then
      ledger[#ledger + 1] = {h = h, amt = tonumber(amt), e = le, s = tonumber(s)}
    end
  end
end

local mine
for _, it in ipairs(ledger) do
  if it.h == holder and it.s == seq and seq > 0 then mine = it end
end
local matched = 0
if mine then matched = 1 end
if mine then
  -- Spent units are already in the count: the report only says how much of
  -- the entry can no longer be given back.
  mine.amt = mine.amt - math.min(used, mine.amt)
  if held >= 0 and held < mine.amt then
    cur = math.max(0, cur - (mine.amt - held))
    mine.amt = held
  end
  if op == 2 then
    cur = math.max(0, cur - mine.amt)
    mine.amt = 0
  end
elseif seq > 0 and used > 0 and (spent_at < 0 or spent_at >= id * w) then
  -- A report on a lease this window does not hold, from a holder that
  -- believes it live: the state was lost (Redis restarted empty) or the
  -- answer to its last renewal was. Count the spends now (twice in the
  -- second case: a loss, never an over-admission). Spends that were all
  -- made before this window began belong to an earlier one.
  cur = math.min(cur + used, 2 * limit)
end

-- avail returns the units a decision could spend now.
local function avail()
  if alg == SLIDING then
    return math.max(0, idiv(limit * w - prev * (w - e) - cur * w, w))
  end
  return math.max(0, limit - cur)
end

-- retry_for returns how long until cost more units fit, the current
-- window's count (lent units included) unchanged.
local function retry_for(cost)
  if alg ~= SLIDING then return wend - t end
  if cur + cost <= limit then
    return w - idiv((limit - cur - cost) * w, prev) - e
  end
  return w - e + w - idiv((limit - cost) * w, cur)
end

local granted, retry, newseq, lease_us = 0, 0, 0, 0
-- A take asking for nothing more still renews a lease that holds units
-- (the holder goes on spending them); with none held it lends nothing.
if op == 1 then
  local own = 0
  if mine then own = mine.amt end
  if need > 0 and avail() + own < need then
    -- The decision cannot be met: give the remainder back and answer as
    -- a one-trip decision would.
    if mine then
      cur = math.max(0, cur - own)
      mine.amt = 0
    end
    retry = retry_for(math.min(math.max(need, want), limit))
  else
    granted = math.min(math.max(want, need - own), avail())
    if granted < want then
      local more = want - granted
      if more > limit then more = 1 end
      retry = retry_for(more)
    end
  end
  if granted > 0 or (mine and mine.amt > 0) then
    if not mine then
      mine = {h = holder, amt = 0}
      ledger[#ledger + 1] = mine
    end
    newseq = now
    for _, it in ipairs(ledger) do
      if it ~= mine and it.s >= newseq then newseq = it.s + 1 end
    end
    if mine.s and mine.s >= newseq then newseq = mine.s + 1 end
    lease_us = math.min(lease, wend - t)
    cur = cur + granted
    mine.amt, mine.e, mine.s = mine.amt + granted, t + lease_us, newseq
  end
end

-- Write back: the window, then the live leases.
local items = {}
for _, it in ipairs(ledger) do
  if it.amt > 0 then
    items[#items + 1] = string.format('%s:%d:%d:%d', it.h, it.amt, it.e, it.s)
  end
end
local base, px
if alg == SLIDING then
  base = string.format('%d %d %d', id, cur, prev)
  px = (id + 2) * w - now
else
  base = string.format('%d %d', id, cur)
  px = wend - now
end
if #items > 0 then base = base .. ' L ' .. table.concat(items, ' ') end
if cur == 0 and prev == 0 and #items == 0 then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], base, 'PX', math.max(1, idiv(px + 999, 1000)) + slack)
end

local reset = 0
if alg == SLIDING then
  if cur > 0 then reset = 2 * w - e elseif prev > 0 then reset = w - e end
elseif cur > 0 then
  reset = wend - t
end
return string.format('%d %d %d %d %d %d %d %d %d', granted, newseq, lease_us, #items, retry,
  avail(), reset, now, matched)
