-- Decides keyed limits; the twin of the arithmetic in package limit (algo.go,
-- rolling.go): every change there is made here too, and the conformance
-- suite runs the same steps against both.
--
-- KEYS[i] is the state key of request i.
-- ARGV[1] is one string of integers separated by spaces:
--   op now {alg limit n p w cost}...
-- op: 1 allow all or nothing, 2 count all, 3 settle (cost is the delta), 4 reset.
-- now: the time in microseconds, or -1 for the server's TIME.
-- alg: 1 token bucket, 2 gcra, 3 fixed, 4 rolling, 5 sliding window.
-- n, p: the rate reduced to lowest terms (p in µs; a token weighs p units);
-- w: the window in µs. Numbers are doubles, exact below 2^53: Go's validation
-- keeps every product below 2^51.
-- The answer is one string, five integers per request:
--   allowed reason remaining retry_us reset_us
-- A denied decision writes nothing; every written key expires when it is back
-- at rest.

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

-- entry formats a rolling log entry; %d, because Lua prints large numbers
-- in exponent notation.
local function entry(t, c)
  return string.format('%d:%d', t, c)
end

local function cdiv(a, b)
  if a <= 0 then return 0 end
  return idiv(a + b - 1, b)
end

local spec = {}
for x in string.gmatch(ARGV[1], '%S+') do spec[#spec + 1] = tonumber(x) end
local op, now = spec[1], spec[2]
-- A time given by the caller (a test's fake clock) does not pass like the
-- server's, which runs the expiries: keep keys an hour longer then.
local slack = 3600000
if now < 0 then
  slack = 0
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local TB, GCRA, FIXED, ROLLING, SLIDING = 1, 2, 3, 4, 5
local LIMITED, EXCEEDS, OTHER = 1, 2, 3

-- window_leases returns the leases of a fixed or sliding window state
-- stored in window a with ledger tail that are live in window id at now,
-- formatted, and the units they hold. A lease never outlives its window, so
-- another window has none.
local function window_leases(tail, a, id)
  local items, lent = {}, 0
  if not tail or a ~= id then return items, lent end
  for h, amt, e, sq in string.gmatch(tail, '([^:%s]+):(%d+):(%d+):(%d+)') do
    if tonumber(e) > now then
      items[#items + 1] = string.format('%s:%s:%s:%s', h, amt, e, sq)
      lent = lent + tonumber(amt)
    end
  end
  return items, lent
end

if op == 4 then
  -- Units lent out (DESIGN-allowances.md) stay lent: the ledger is kept,
  -- and on a window, the units it holds stay in the window's count.
  for i = 1, #KEYS do
    local o = 2 + (i - 1) * 6
    local alg, w = spec[o + 1], spec[o + 5]
    local v = redis.call('GET', KEYS[i])
    local tail = v and string.match(v, ' L (.*)$')
    if tail and (alg == FIXED or alg == SLIDING) then
      local a = tonumber(string.match(v, '^(%-?%d+)'))
      local id = math.max(idiv(now, w), a)
      local items, lent = window_leases(tail, a, id)
      if lent > 0 then
        local base = string.format('%d %d', id, lent)
        if alg == SLIDING then base = base .. ' 0' end
        redis.call('SET', KEYS[i], base .. ' L ' .. table.concat(items, ' '), 'KEEPTTL')
      else
        redis.call('DEL', KEYS[i])
      end
    elseif tail then
      redis.call('SET', KEYS[i], '0 0 L ' .. tail, 'KEEPTTL')
    else
      redis.call('DEL', KEYS[i])
    end
  end
  return ''
end

local reqs = {}
for i = 1, #KEYS do
  local o = 2 + (i - 1) * 6
  reqs[i] = {key = KEYS[i], alg = spec[o + 1], limit = spec[o + 2], n = spec[o + 3],
    p = spec[o + 4], w = spec[o + 5], cost = spec[o + 6]}
  reqs[i].cap = reqs[i].limit * reqs[i].p
end

local states = {}

local function load(r)
  local st = states[r.key]
  if st then return st end
  st = {changed = false, r = r}
  if r.alg == ROLLING then
    st.t, st.c, st.sum, st.extra = {}, {}, 0, 0
    for _, it in ipairs(redis.call('LRANGE', r.key, 0, -1)) do
      local t, c = string.match(it, '^(%d+):(%d+)$')
      st.t[#st.t + 1], st.c[#st.c + 1] = tonumber(t), tonumber(c)
      st.sum = st.sum + tonumber(c)
    end
    st.head = 1
  else
    local v = redis.call('GET', r.key)
    local x = {0, 0, 0}
    st.lent = 0
    if v then
      -- A token bucket or GCRA state may end with a ledger of lent units
      -- (DESIGN-allowances.md): " L holder:amount:lease_end:seq[:charged] ...".
      local base, tail = string.match(v, '^(.-) L (.*)$')
      if not base then base = v end
      local i = 1
      for f in string.gmatch(base, '%S+') do x[i] = tonumber(f); i = i + 1 end
      if tail then
        st.ledger = {}
        for h, amt, e, sq, c in string.gmatch(tail, '([^:%s]+):(%d+):(%d+):(%d+):?(%d*)') do
          st.ledger[#st.ledger + 1] = {h = h, amt = tonumber(amt), e = tonumber(e), s = tonumber(sq), c = c}
        end
      end
    end
    st.a, st.b, st.c = x[1], x[2], x[3]
    st.a0, st.raw = x[1], v and string.match(v, ' L (.*)$')
  end
  states[r.key] = st
  return st
end

local function drain(d, last, t, n)
  if d <= 0 then return 0 end
  local el = t - last
  if el <= 0 then return d end
  if el > idiv(d, n) then return 0 end
  return d - el * n
end

local function gcra_debt(r, st)
  local diff = st.a - now
  if diff < 0 then return 0 end
  local lim = idiv(2 * r.cap, r.n) + 1
  if diff > lim then diff = lim end
  return diff * r.n + st.b
end

-- expire charges the leases of st's ledger that have ended as spent at
-- their end, in order, and sums the live ones into st.lent. It depends only
-- on the stored state and now, so a state not written after it loses
-- nothing: the next load charges the same.
local function expire(r, st)
  if not st.ledger or st.expired then return end
  st.expired = true
  table.sort(st.ledger, function(x, y) return x.e < y.e end)
  local live = {}
  for _, it in ipairs(st.ledger) do
    if it.e <= now then
      local t = it.e
      if r.alg == TB then
        t = math.max(t, st.b)
        st.a, st.b = drain(st.a, st.b, t, r.n) + it.amt * r.p, t
      else
        local diff = st.a - t
        local d = it.amt * r.p
        if diff >= 0 then d = d + diff * r.n + st.b end
        local q = idiv(d, r.n)
        st.a, st.b = t + q, d - q * r.n
      end
      st.changed = true
    else
      live[#live + 1] = it
      st.lent = st.lent + it.amt
    end
  end
  st.ledger = live
end

-- bucket decides cost on debt d; returns the decision and the new debt.
local function bucket(r, d, cost)
  local dec = {0, 0, 0, 0, 0}
  local nd = d
  local need = d + cost * r.p
  if cost > r.limit then
    dec[2] = EXCEEDS
  elseif need > r.cap and cost > 0 then
    dec[2] = LIMITED
    dec[4] = cdiv(need - r.cap, r.n)
  else
    dec[1] = 1
    nd = need
  end
  dec[3] = math.max(0, idiv(r.cap - nd, r.p))
  dec[5] = cdiv(nd, r.n)
  return dec, nd
end

local function set_gcra(r, st, d)
  local q = idiv(d, r.n)
  st.a, st.b = now + q, d - q * r.n
end

local function fixed(r, st, cost, count)
  local id = idiv(now, r.w)
  local t = now
  if id < st.a then id, t = st.a, st.a * r.w end
  local n = 0
  if id == st.a then n = st.b end
  local e = (id + 1) * r.w
  local dec = {0, 0, 0, 0, 0}
  if cost > r.limit then
    dec[2] = EXCEEDS
  elseif n + cost > r.limit and cost > 0 then
    dec[2] = LIMITED
    dec[4] = e - t
  else
    dec[1] = 1
  end
  if cost > 0 and (dec[1] == 1 or count) then
    n = math.min(n + cost, idiv(2 ^ 50, r.w))
    st.a, st.b, st.changed = id, n, true
  end
  dec[3] = math.max(0, r.limit - n)
  if n > 0 then dec[5] = e - t end
  return dec
end

local function sliding_retry(r, prev, cur, cost, e)
  local w = r.w
  if cur + cost <= r.limit then
    return w - idiv((r.limit - cur - cost) * w, prev) - e
  end
  return w - e + w - idiv((r.limit - cost) * w, cur)
end

local function sliding(r, st, cost, count)
  local w = r.w
  local id = idiv(now, w)
  local t = now
  if id < st.a then id, t = st.a, st.a * w end
  local cur, prev = 0, 0
  if id == st.a then cur, prev = st.b, st.c elseif id == st.a + 1 then prev = st.b end
  local e = t - id * w
  local lim = r.limit * w
  local dec = {0, 0, 0, 0, 0}
  if cost > r.limit then
    dec[2] = EXCEEDS
  elseif prev * (w - e) + (cur + cost) * w > lim and cost > 0 then
    dec[2] = LIMITED
    dec[4] = sliding_retry(r, prev, cur, cost, e)
  else
    dec[1] = 1
  end
  if cost > 0 and (dec[1] == 1 or count) then
    cur = math.min(cur + cost, 2 * r.limit)
    st.a, st.b, st.c, st.changed = id, cur, prev, true
  end
  dec[3] = math.max(0, idiv(lim - prev * (w - e) - cur * w, w))
  if cur > 0 then dec[5] = 2 * w - e elseif prev > 0 then dec[5] = w - e end
  return dec
end

-- rolling decides cost on the log st; an allowed cost is added to st.extra,
-- logged at commit.
local function rolling(r, st, cost)
  local last = #st.t
  local t = now
  if last >= st.head and st.t[last] > t then t = st.t[last] end
  st.now = t
  while st.head <= last and st.t[st.head] + r.w <= t do
    st.sum = st.sum - st.c[st.head]
    st.head = st.head + 1
  end
  local sum = st.sum + st.extra
  local dec = {0, 0, 0, 0, 0}
  if cost > r.limit then
    dec[2] = EXCEEDS
  elseif sum + cost > r.limit and cost > 0 then
    dec[2] = LIMITED
    local excess, freed = sum + cost - r.limit, 0
    dec[4] = r.w
    for i = st.head, last do
      freed = freed + st.c[i]
      if freed >= excess then dec[4] = st.t[i] + r.w - t; break end
    end
  else
    dec[1] = 1
    if cost > 0 then st.extra, st.changed = st.extra + cost, true end
    sum = sum + cost
  end
  dec[3] = math.max(0, r.limit - sum)
  if st.extra > 0 then dec[5] = r.w
  elseif last >= st.head then dec[5] = st.t[last] + r.w - t
  elseif sum > 0 then dec[5] = r.w end
  return dec
end

local function decide(r, cost, count)
  local st = load(r)
  if r.alg == TB then
    expire(r, st)
    local t = math.max(now, st.b)
    local lent = st.lent * r.p
    local dec, nd = bucket(r, drain(st.a, st.b, t, r.n) + lent, cost)
    if dec[1] == 1 and cost > 0 then st.a, st.b, st.changed = nd - lent, t, true end
    return dec
  elseif r.alg == GCRA then
    expire(r, st)
    local lent = st.lent * r.p
    local dec, nd = bucket(r, gcra_debt(r, st) + lent, cost)
    if dec[1] == 1 and cost > 0 then set_gcra(r, st, nd - lent); st.changed = true end
    return dec
  elseif r.alg == FIXED then
    return fixed(r, st, cost, count)
  elseif r.alg == SLIDING then
    return sliding(r, st, cost, count)
  end
  return rolling(r, st, cost)
end

-- ttl returns, in ms rounded up, how long until st is at rest.
local function ttl(r, st)
  local us = 0
  if r.alg == TB then
    us = st.b - now + cdiv(st.a, r.n)
  elseif r.alg == GCRA then
    us = st.a - now + 1
  elseif r.alg == FIXED then
    us = (st.a + 1) * r.w - now
  elseif r.alg == SLIDING then
    us = (st.a + 2) * r.w - now
  else
    us = st.now + r.w - now
  end
  return math.max(1, cdiv(us, 1000)) + slack
end

local function write(st)
  local r = st.r
  if r.alg == ROLLING then
    local drop = st.head - 1
    if drop > 0 then redis.call('LTRIM', r.key, drop, -1) end
    local last = #st.t
    if last >= st.head and st.t[last] == st.now then
      redis.call('LSET', r.key, -1, entry(st.now, st.c[last] + st.extra))
    elseif st.extra > 0 then
      redis.call('RPUSH', r.key, entry(st.now, st.extra))
    end
    redis.call('PEXPIRE', r.key, ttl(r, st))
    return
  end
  local v, us = nil, 0
  if r.alg == FIXED or r.alg == SLIDING then
    -- Lent units are in the window's count; the live leases of the
    -- window stay in the ledger.
    local items = window_leases(st.raw, st.a0, st.a)
    if #items > 0 then st.tail = ' L ' .. table.concat(items, ' ') end
  elseif st.ledger and #st.ledger > 0 then
    -- Every lease may yet be charged at its end: keep the key until that
    -- charge has drained too.
    local items, last = {}, now
    for _, it in ipairs(st.ledger) do
      local x = string.format('%s:%d:%d:%d', it.h, it.amt, it.e, it.s)
      if it.c and it.c ~= '' then x = x .. ':' .. it.c end
      items[#items + 1] = x
      if it.e > last then last = it.e end
    end
    st.tail = ' L ' .. table.concat(items, ' ')
    us = last - now + cdiv(st.a + st.lent * r.p, r.n)
    if r.alg == GCRA then us = last - now + cdiv(math.max(0, st.a - now) * r.n + st.lent * r.p, r.n) end
  end
  if r.alg == SLIDING then
    v = string.format('%d %d %d', st.a, st.b, st.c)
  elseif r.alg == GCRA and st.b == 0 then
    v = string.format('%d', st.a)
  else
    v = string.format('%d %d', st.a, st.b)
  end
  if st.tail then v = v .. st.tail end
  redis.call('SET', r.key, v, 'PX', math.max(ttl(r, st), cdiv(us, 1000) + slack))
end

local function settle(r, delta)
  local st = load(r)
  delta = math.max(-2 * r.limit, math.min(delta, 2 * r.limit))
  if r.alg == TB then
    expire(r, st)
    local t = math.max(now, st.b)
    local d = math.max(0, math.min(drain(st.a, st.b, t, r.n) + delta * r.p, 2 * r.cap))
    st.a, st.b = d, t
    if d == 0 and not st.ledger then redis.call('DEL', r.key) else write(st) end
    local dec = bucket(r, d + st.lent * r.p, 0)
    return dec
  elseif r.alg == GCRA then
    expire(r, st)
    local d = math.max(0, math.min(gcra_debt(r, st) + delta * r.p, 2 * r.cap))
    set_gcra(r, st, d)
    if d == 0 and not st.ledger then redis.call('DEL', r.key) else write(st) end
    return bucket(r, d + st.lent * r.p, 0)
  elseif r.alg == FIXED then
    local id = math.max(idiv(now, r.w), st.a)
    local n = st.b
    if id ~= st.a then n = 0 end
    local _, lent = window_leases(st.raw, st.a0, id)
    st.a, st.b = id, math.max(lent, math.min(n + delta, 2 * r.limit))
    if st.b == 0 then redis.call('DEL', r.key) else write(st) end
    return fixed(r, st, 0, false)
  elseif r.alg == SLIDING then
    local id = math.max(idiv(now, r.w), st.a)
    if id == st.a + 1 then st.c, st.b = st.b, 0 elseif id > st.a + 1 then st.b, st.c = 0, 0 end
    st.a = id
    local _, lent = window_leases(st.raw, st.a0, id)
    if delta >= 0 then
      st.b = math.min(st.b + delta, 2 * r.limit)
    else
      local take = math.max(0, math.min(st.b - lent, -delta))
      st.b = st.b - take
      st.c = math.max(0, st.c - (-delta - take))
    end
    if st.b == 0 and st.c == 0 then redis.call('DEL', r.key) else write(st) end
    return sliding(r, st, 0, false)
  end
  rolling(r, st, 0)
  local room = 2 * r.limit - st.sum
  if delta > 0 then
    st.extra = math.min(delta, room)
  end
  local last = #st.t
  while delta < 0 and last >= st.head do
    local take = math.min(st.c[last], -delta)
    st.c[last] = st.c[last] - take
    st.sum = st.sum - take
    delta = delta + take
    if st.c[last] == 0 then st.t[last], st.c[last] = nil, nil; last = last - 1 end
  end
  redis.call('DEL', r.key)
  for i = st.head, last do redis.call('RPUSH', r.key, entry(st.t[i], st.c[i])) end
  if st.extra > 0 then
    if last >= st.head and st.t[last] == st.now then
      redis.call('LSET', r.key, -1, entry(st.now, st.c[last] + st.extra))
    else
      redis.call('RPUSH', r.key, entry(st.now, st.extra))
    end
    st.sum, st.t[#st.t + 1], st.c[#st.c + 1] = st.sum + st.extra, st.now, st.extra
    st.extra = 0
  end
  if redis.call('EXISTS', r.key) == 1 then
    redis.call('PEXPIRE', r.key, math.max(1, cdiv(st.t[#st.t] + r.w - now, 1000)) + slack)
  end
  return rolling(r, st, 0)
end

local out = {}
local function emit(dec)
  for j = 1, 5 do out[#out + 1] = string.format('%d', dec[j]) end
end

if op == 3 then
  emit(settle(reqs[1], reqs[1].cost))
  return table.concat(out, ' ')
end

local count = op == 2
local decs, all = {}, true
for i, r in ipairs(reqs) do
  decs[i] = decide(r, r.cost, count)
  if decs[i][1] == 0 then all = false end
end
if all or count then
  for _, st in pairs(states) do
    if st.changed then write(st) end
  end
else
  -- Nothing is spent: the allowed decisions say what would remain.
  states = {}
  for i, r in ipairs(reqs) do
    if decs[i][1] == 1 then
      decs[i] = decide(r, 0, false)
      decs[i][1], decs[i][2] = 0, OTHER
    end
  end
end
for i = 1, #reqs do emit(decs[i]) end
return table.concat(out, ' ')
