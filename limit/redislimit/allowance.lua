-- Lends allowances out of one key's token bucket or GCRA state (see
-- DESIGN-allowances.md, section 2.4).
--
-- KEYS[1] is the state key. ARGV[1] is fifteen signed 64-bit little-endian
-- integers (read with struct.unpack, as allow.lua's):
--   op alg limit n p w now seq used spent_at want lease need held grid
-- op: 1 take or renew, 2 return. alg: 1 token bucket, 2 gcra. now: µs, or
-- -1 for the server's TIME. seq: the holder's lease (0: none). used: units
-- spent under it since the last report; spent_at: a time at or after the
-- last of those spends (-1: now). want: units asked for. lease: µs.
-- need: the cost of the decision waiting for this call (0: none): when the
-- holder's remainder and the grant cannot cover it, nothing is granted, the
-- remainder is given back, and the answer is the one-trip denial of that
-- cost (its retry time measured for need or want, whichever is larger).
-- held: the holder's remainder when it sent the call (-1: not known); the
-- lease is cut to it, the rest given back.
-- grid: µs (0: none), a whole fraction of the limit's period: a take is
-- granted what was free at the last point of the grid (multiples of grid
-- since the Unix epoch), and every retry time is a point of it, so that
-- on a saturated key each period of the clock lends its refill exactly
-- (DESIGN-allowances.md, section 2.7).
-- retry_us, when the take is met: how long until another retry_units
-- units (want, or fewer if what is lent leaves less of the limit) are free
-- beyond everything lent, this grant included (0: they are now).
-- ARGV[2] is the holder's id (no spaces or colons).
--
-- The state is "<a> <b>" as in limit.lua, followed, while anything is lent,
-- by " L" and one "holder:amount:lease_end:seq" item per lease. Every lent
-- unit counts as debt that does not drain until it is reported spent
-- (charged at min(now, spent_at)), returned (removed) or its lease ends
-- (charged at the lease end). On a grid, a holder that asked and holds
-- nothing has an item of amount 0 and seq 0 (a marker: it lends nothing
-- and matches no report) until its next call, or a lease and a grid step.
--
-- The answer: "granted seq lease_us holders retry_us remaining reset_us now
-- matched retry_units", holders the leases and markers on the key (this
-- holder's included), matched 1 when the holder's lease seq was live,
-- retry_units what retry_us promises on a met take (0: no promise).

local TB = 1

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

local function cdiv(a, b)
  if a <= 0 then return 0 end
  return idiv(a + b - 1, b)
end

local op, alg, limit, n, p, _, now, seq, used, spent_at, want, lease, need, held, grid =
  struct.unpack('<i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8', ARGV[1])
-- No lease holds more than the limit, so no report of its spends is more:
-- a report past it (a holder's bookkeeping gone wrong) is charged as the
-- limit, not as a debt that would hold the key for years.
used = math.max(0, math.min(used, limit))
local holder = ARGV[2]
local cap = limit * p
local slack = 3600000
if now < 0 then
  local t = redis.call('TIME')
  now, slack = tonumber(t[1]) * 1000000 + tonumber(t[2]), 0
end

-- Load the state and its ledger.
local a, b = 0, 0
local ledger = {}
local v = redis.call('GET', KEYS[1])
if v then
  local base, tail = string.match(v, '^(.-) L(.*)$')
  if not base then base = v end
  local x, y = string.match(base, '^(%-?%d+) ?(%-?%d*)')
  a, b = tonumber(x), tonumber(y) or 0
  if tail then
    -- r: the item's text, written back as it is unless the item changes.
    -- A cold lease's item may end in ":charged" (allow.lua), kept in r.
    for r, h, amt, e, s in string.gmatch(tail, '(([^:%s]+):(%d+):(%d+):(%d+):?%d*)') do
      ledger[#ledger + 1] = {h = h, amt = tonumber(amt), e = tonumber(e), s = tonumber(s), r = r}
    end
  end
end

-- debt returns the state's own debt (units) at t. Before the state's
-- time (a take grid's last point, after a later charge) it is what
-- draining at the rate leaves at the state's time, at most the capacity;
-- a state dated after now (another holder's clock ahead of this one) is
-- read at its own time.
local function debt(t)
  if alg == TB then
    local el = t - b
    if el < 0 and b <= now then return math.min(math.max(a, 0) - el * n, cap) end
    if a <= 0 then return 0 end
    if el <= 0 then return a end
    if el > idiv(a, n) then return 0 end
    return a - el * n
  end
  local diff = a - t
  if diff < 0 then return 0 end
  return diff * n + b
end

-- charge adds u units spent at t (never before the state's own time).
local function charge(u, t)
  if u <= 0 then return end
  if alg == TB then
    t = math.max(t, b)
    a, b = debt(t) + u * p, t
  else
    local d = debt(t) + u * p
    local q = idiv(d, n)
    a, b = t + q, d - q * n
  end
end

-- Leases that have ended count as spent at their end, in order.
local sorted = true
for i = 2, #ledger do
  if ledger[i].e < ledger[i - 1].e then sorted = false end
end
if not sorted then table.sort(ledger, function(x, y) return x.e < y.e end) end
local live = {}
for _, it in ipairs(ledger) do
  if it.e <= now then charge(it.amt, it.e) else live[#live + 1] = it end
end
ledger = live

-- The holder's own lease, if seq matches: charge its report.
local mine
for _, it in ipairs(ledger) do
  if it.h == holder and it.s == seq and seq > 0 then mine = it end
end
-- A holder's marker (below) stands only until its next call, whose
-- answer takes its place.
do
  local kept = {}
  for _, it in ipairs(ledger) do
    if not (it.h == holder and it.s == 0 and it.amt == 0) then kept[#kept + 1] = it end
  end
  ledger = kept
end
local matched = 0
if mine then
  matched = 1
  mine.r = nil -- its report changes it
end
if mine then
  local u = math.min(used, mine.amt)
  local t = now
  if spent_at >= 0 and spent_at < now then t = spent_at end
  charge(u, t)
  mine.amt = mine.amt - u
  if held >= 0 and held < mine.amt then mine.amt = held end
  if op == 2 then mine.amt = 0 end
elseif seq > 0 and used > 0 then
  -- A report on a lease this state does not hold, from a holder that
  -- believes it live: the state was lost (Redis restarted empty) or the
  -- answer to its last renewal was. Charge the spends now: in the first
  -- case this state knows them from here on, in the second they count
  -- twice (a loss, never an over-admission).
  local t = now
  if spent_at >= 0 and spent_at < now then t = spent_at end
  charge(used, t)
end

local lent = 0
for _, it in ipairs(ledger) do lent = lent + it.amt end

-- ongrid returns the wait from now to the first grid point at or after
-- now + r (r itself without a grid).
local function ongrid(r)
  if grid <= 0 then return r end
  return cdiv(now + r, grid) * grid - now
end

local d = debt(now)
local granted, retry, newseq, lease_us, retry_units = 0, 0, 0, 0, 0
local own = 0
if mine then own = mine.amt end
if op == 1 then
  -- Free at the last grid point: the debt then is never less than now's.
  local dg = d
  if grid > 0 then dg = debt(idiv(now, grid) * grid) end
  local avail = math.max(0, idiv(cap - dg - lent * p, p))
  -- On a grid, while others hold leases on the key, each of them is left
  -- its share of a point's refill: holders that lack units come back at
  -- the same point, and the first there does not take it all.
  local share, reserve = 0, 0
  if grid > 0 then
    local others = 0
    for _, it in ipairs(ledger) do
      if it ~= mine and (it.amt > 0 or it.s == 0) then others = others + 1 end
    end
    if others > 0 then
      share = cdiv(idiv(grid * n, p), others + 1)
      reserve = others * share
    end
  end
  if need > 0 and avail + own < need then
    -- The decision cannot be met: give the remainder back and answer as
    -- a one-trip decision would, with what the others hold.
    if mine then
      mine.amt = 0
      lent = lent - own
    end
    local w = math.min(math.max(need, want), limit)
    if grid > 0 then w = need end
    retry = ongrid(cdiv(d + (lent + w) * p - cap, n))
  else
    local ask = math.max(want, need - own)
    granted = math.min(ask, avail)
    if reserve > 0 then
      granted = math.min(granted, math.max(math.min(avail, share), avail - reserve, need - own))
    end
    if want > 0 then
      -- The holder's next take: when another want units (fewer if what
      -- is lent leaves less of the limit) would be free beyond what is
      -- lent, this grant included, so that on a saturated key it takes
      -- its share at once rather than the few units refilled since the
      -- last take (DESIGN 2.5).
      local w = math.min(want, limit - lent - granted)
      if w >= 1 and grid > 0 then
        -- On a grid: none if want more are free at the last point beyond
        -- the others' shares; else the next point with a unit free, and
        -- what is free then (up to want), so that every point's refill
        -- is taken by the holders that lack units.
        if avail - granted - reserve < w then
          retry = ongrid(cdiv(d + (lent + granted + reserve + 1) * p - cap, n))
          if retry > 0 then
            local free = idiv(cap - debt(now + retry) - (lent + granted + reserve) * p, p)
            retry_units = math.max(1, math.min(w, free))
          end
        end
      elseif w >= 1 then
        retry = cdiv(d + (lent + granted + w) * p - cap, n)
        if retry > 0 then retry_units = w end
      elseif granted < want then
        -- Only lease ends make room: a time for one unit by draining,
        -- for the renewals to wait for; no promise.
        retry = ongrid(cdiv(d + (lent + granted + 1) * p - cap, n))
      end
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
    mine.amt, mine.e, mine.s = mine.amt + granted, now + lease, newseq
    lent = lent + granted
    lease_us = lease
  elseif grid > 0 and want > 0 then
    -- On a grid, a holder that asked and holds nothing now is waiting
    -- for its share at the next point: a marker (no units, seq 0) keeps
    -- it counted among the others until then, so that the holders there
    -- before it leave it its share rather than halving the refill
    -- between them.
    ledger[#ledger + 1] = {h = holder, amt = 0, e = now + lease + grid, s = 0}
  end
end

-- Write back: the state, then the live leases.
local items, holders, last_end = {}, 0, now
for _, it in ipairs(ledger) do
  if it.amt > 0 or it.s == 0 then
    items[#items + 1] = it.r or string.format('%s:%d:%d:%d', it.h, it.amt, it.e, it.s)
    holders = holders + 1
    if it.e > last_end then last_end = it.e end
  end
end
local base
if alg == TB then
  base = string.format('%d %d', a, b)
elseif b == 0 then
  base = string.format('%d', a)
else
  base = string.format('%d %d', a, b)
end
local rest
if alg == TB then rest = b - now + cdiv(a, n) else rest = a - now + 1 end
if #items > 0 then
  base = base .. ' L ' .. table.concat(items, ' ')
  -- Every lease may yet be charged at its end: keep the key until that
  -- charge has drained too.
  rest = math.max(rest, last_end - now + cdiv(d + lent * p, n))
end
if rest <= 0 and #items == 0 then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], base, 'PX', math.max(1, cdiv(rest, 1000)) + slack)
end

local remaining = math.max(0, idiv(cap - d - lent * p, p))
return string.format('%d %d %d %d %d %d %d %d %d %d', granted, newseq, lease_us, holders, retry,
  remaining, cdiv(d + lent * p, n), now, matched, retry_units)
