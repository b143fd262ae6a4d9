-- The fast path of limit.lua for one decision on one key under the token
-- bucket, GCRA or fixed window: the same arithmetic, without the tables and
-- functions that decisions on several keys need. Changes to either script
-- are made to both; the conformance suite runs every step on both.
--
-- KEYS[1] is the state key; ARGV[1] is "alg limit n p w cost now" (see
-- limit.lua). The answer is "allowed reason remaining retry_us reset_us".

local alg, limit, n, p, w, cost, now = string.match(ARGV[1],
  '^(%d) (%d+) (%d+) (%d+) (%d+) (%d+) (%-?%d+)$')
alg, limit, n, p, w, cost, now = tonumber(alg), tonumber(limit), tonumber(n),
  tonumber(p), tonumber(w), tonumber(cost), tonumber(now)
local slack = 3600000 -- see limit.lua
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  slack = 0
end

local function idiv(a, b)
  local q = math.floor(a / b)
  while q * b > a do q = q - 1 end
  while (q + 1) * b <= a do q = q + 1 end
  return q
end

local v = redis.call('GET', KEYS[1])
local a, b = 0, 0
if v then
  local x, y = string.match(v, '^(%-?%d+) ?(%-?%d*)')
  a, b = tonumber(x), tonumber(y) or 0
end

local allowed, reason, remaining, retry, reset = 0, 0, 0, 0, 0

if alg == 3 then
  local id, t = idiv(now, w), now
  if id < a then id, t = a, a * w end
  local count = 0
  if id == a then count = b end
  local e = (id + 1) * w
  if cost > limit then
    reason = 2
  elseif count + cost > limit and cost > 0 then
    reason, retry = 1, e - t
  else
    allowed = 1
    if cost > 0 then
      count = math.min(count + cost, idiv(2 ^ 50, w))
      redis.call('SET', KEYS[1], string.format('%d %d', id, count), 'PX',
        math.max(1, idiv(e - now + 999, 1000)) + slack)
    end
  end
  remaining = math.max(0, limit - count)
  if count > 0 then reset = e - t end
  return string.format('%d %d %d %d %d', allowed, reason, remaining, retry, reset)
end

-- Token bucket (alg 1: a = debt, b = its time) and GCRA (alg 2: a = TAT,
-- b = its fraction): both reduce to a debt d in units, a token weighing p.
local cap, d, t = limit * p, 0, now
if alg == 1 then
  t = math.max(now, b)
  d = a
  if d > 0 then
    local el = t - b
    if el > 0 then
      if el > idiv(d, n) then d = 0 else d = d - el * n end
    end
  end
else
  local diff = a - now
  if diff >= 0 then
    local lim = idiv(2 * cap, n) + 1
    if diff > lim then diff = lim end
    d = diff * n + b
  end
end
local need = d + cost * p
if cost > limit then
  reason = 2
elseif need > cap and cost > 0 then
  reason, retry = 1, idiv(need - cap + n - 1, n)
else
  allowed = 1
  d = need
end
remaining = math.max(0, idiv(cap - d, p))
if d > 0 then reset = idiv(d + n - 1, n) end
if allowed == 1 and cost > 0 then
  local val
  if alg == 1 then
    val = string.format('%d %d', d, t)
  else
    local q = idiv(d, n)
    local frac = d - q * n
    if frac == 0 then val = string.format('%d', now + q) else val = string.format('%d %d', now + q, frac) end
  end
  redis.call('SET', KEYS[1], val, 'PX', math.max(1, idiv(t - now + reset + 999, 1000)) + slack)
end
return string.format('%d %d %d %d %d', allowed, reason, remaining, retry, reset)
