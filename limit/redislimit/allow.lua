-- The fast path of limit.lua: independent one-key decisions under the token
-- bucket, GCRA or fixed window, decided one after the other in one call, so
-- that concurrent callers share a round trip. The same arithmetic, without
-- the tables and functions that all-or-nothing decisions on several keys
-- need. Changes to either script are made to both; the conformance suite
-- runs every step on both.
--
-- KEYS[i] is the state key of decision i; ARGV[1] holds, for each decision,
-- twelve signed 64-bit little-endian integers, read with struct.unpack
-- (about a tenth of the time parsing them as text takes, which was a fifth
-- of a renewal's time in a batch): "alg limit n p w cost now want lease
-- seq used spent_at" (see limit.lua for the first seven; now is -1 for the
-- server's TIME). The last five lend
-- a token bucket or GCRA key far from its limit a few units along with the
-- decision (Options.ColdLease, DESIGN-allowances.md section 10), to the
-- holder ARGV[2]: want units for lease µs, granted only when the decision
-- is allowed, the holder has no live lease on the key, and at least half
-- the limit stays free beyond them; seq, when not 0, is the holder's
-- earlier lease on the key, which the call ends first: used is every unit
-- spent under it since its grant (the last at or before spent_at µs; -1:
-- now), of which those not charged yet are (the lease's item keeps the
-- count charged), the rest given back. Counting from the grant makes a
-- report idempotent: one sent again after its answer was lost charges
-- nothing twice. A negative seq extends that lease instead (an early
-- renewal): the spends are charged, the rest stays lent (the holder goes
-- on spending it) and the lease keeps its seq and takes the new units and
-- end, or, when none are granted, keeps its old end. Units granted by a
-- renewal whose answer was lost stay in the lease, given back with it.
-- want 0 and seq 0: a plain decision.
-- A key listed twice sees the first decision's effect. The answer is one
-- string, "allowed reason remaining retry_us reset_us granted seq now" per
-- decision (granted units lent under the lease seq: a new lease's, or
-- an extended lease's own, with or without new units; seq 0 when the
-- state did not hold the lease extended; now the server's µs). Commands:
-- one MGET, one TIME when a decision asks for the server's clock, one SET
-- per key that changed.

local spec, pos = ARGV[1], 1
local SPEC = '<i8i8i8i8i8i8i8i8i8i8i8i8'

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

-- charge adds amt units spent at t to a token bucket (alg 1) or GCRA
-- state: a lease of the state's ledger that ended (DESIGN-allowances.md).
local function charge(alg, st, amt, t, n, p)
  if alg == 1 then
    t = math.max(t, st.b)
    local d, el = st.a, t - st.b
    if d <= 0 then d = 0 elseif el > 0 then
      if el > idiv(d, n) then d = 0 else d = d - el * n end
    end
    st.a, st.b = d + amt * p, t
  else
    local diff, d = st.a - t, amt * p
    if diff >= 0 then d = d + diff * n + st.b end
    local q = idiv(d, n)
    st.a, st.b = t + q, d - q * n
  end
end

local holder = ARGV[2] or ''
local server
local vals = redis.call('MGET', unpack(KEYS))
local states, order = {}, {}
local out = {}

-- item formats a lease: "holder:amount:lease_end:seq", and ":charged" when
-- a cold lease's reported spends were charged (see seq and used above).
local function item(it)
  if it.c and it.c > 0 then return string.format('%s:%d:%d:%d:%d', it.h, it.amt, it.e, it.s, it.c) end
  return string.format('%s:%d:%d:%d', it.h, it.amt, it.e, it.s)
end

-- tail formats the live leases of a token bucket or GCRA state.
local function tail(st)
  if #st.ledger == 0 then return '' end
  local items = {}
  for _, it in ipairs(st.ledger) do
    -- An item read from the state and not changed keeps its text (r).
    items[#items + 1] = it.r or item(it)
  end
  return ' L ' .. table.concat(items, ' ')
end

for i = 1, #KEYS do
  local alg, limit, n, p, w, cost, now, want, lease, seq, used, spent_at
  alg, limit, n, p, w, cost, now, want, lease, seq, used, spent_at, pos = struct.unpack(SPEC, spec, pos)
  used = math.max(0, used)
  -- A time given by the caller (a test's fake clock) does not pass like the
  -- server's, which runs the expiries: keep keys an hour longer then.
  local slack = 3600000
  if now < 0 then
    if not server then
      local t = redis.call('TIME')
      server = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    now, slack = server, 0
  end
  local key = KEYS[i]
  local st = states[key]
  if not st then
    st = {a = 0, b = 0, lent = 0, ledger = {}}
    local v = vals[i]
    if v then
      local x, y = string.match(v, '^(%-?%d+) ?(%-?%d*)')
      st.a, st.b = tonumber(x), tonumber(y) or 0
      -- A ledger of lent units (token bucket and GCRA): leases that ended
      -- count as spent at their end; the live ones as debt that does not
      -- drain. Charging depends only on the stored state and now, so a
      -- denied decision need not write it.
      local t = string.match(v, ' L (.*)$')
      if t and (alg == 1 or alg == 2) then
        local ledger, sorted, last = {}, true, -math.huge
        for r, h, amt, e, sq, c in string.gmatch(t, '(([^:%s]+):(%d+):(%d+):(%d+):?(%d*))') do
          e = tonumber(e)
          if e < last then sorted = false end
          last = e
          ledger[#ledger + 1] = {h = h, amt = tonumber(amt), e = e, s = tonumber(sq), c = tonumber(c) or 0, r = r}
        end
        if not sorted then table.sort(ledger, function(x, y) return x.e < y.e end) end
        for _, it in ipairs(ledger) do
          if it.e <= now then
            charge(alg, st, it.amt, it.e, n, p)
          else
            st.lent = st.lent + it.amt
            st.ledger[#st.ledger + 1] = it
          end
        end
      elseif t and alg == 3 then
        -- A fixed window's lent units are in its count: the ledger only
        -- goes along while the window lasts (leases end with it).
        st.wtail, st.wid = ' L ' .. t, st.a
      end
    end
    states[key] = st
  end
  local allowed, reason, remaining, retry, reset = 0, 0, 0, 0, 0
  local granted, newseq, carry = 0, 0, nil

  if alg == 3 then
    local a, b = st.a, st.b
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
        st.a, st.b = id, count
        st.val = string.format('%d %d', id, count)
        if st.wtail and id == st.wid then st.val = st.val .. st.wtail end
        st.px = math.max(1, idiv(e - now + 999, 1000)) + slack
      end
    end
    remaining = math.max(0, limit - count)
    if count > 0 then reset = e - t end
  else
    -- Token bucket (alg 1: a = debt, b = its time) and GCRA (alg 2: a =
    -- TAT, b = its fraction): both reduce to a debt d in units, a token
    -- weighing p units.
    local extend = seq < 0
    if extend then seq = -seq end
    if seq > 0 then
      -- The holder's earlier lease ends: its spends not charged yet are,
      -- the rest given back (or, extended, kept lent as carry). A lease
      -- the state does not hold (it ended, or Redis restarted empty) has
      -- its reported spends charged all the same, at most the limit (no
      -- lease holds more at once): a loss at worst, never an
      -- over-admission.
      local t = now
      if spent_at >= 0 and spent_at < now then t = spent_at end
      local kept, found = {}, false
      for _, it in ipairs(st.ledger) do
        if not found and it.h == holder and it.s == seq then
          found = true
          local c = it.c or 0
          local u = math.min(math.max(used - c, 0), it.amt)
          charge(alg, st, u, t, n, p)
          st.lent = st.lent - u
          if extend then
            carry = {h = holder, amt = it.amt - u, e = it.e, s = it.s, c = math.max(c, used)}
          else
            st.lent = st.lent - (it.amt - u)
          end
        else
          kept[#kept + 1] = it
        end
      end
      if not found then
        charge(alg, st, math.min(used, limit), t, n, p)
        -- The holder went on spending what it held: it is told (seq 0)
        -- that the lease is gone, not lent anew under it.
        if extend then want = 0 end
      end
      st.ledger, st.dirty = kept, true
    end
    local a, b = st.a, st.b
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
    local lent = st.lent * p
    local need = d + lent + cost * p
    if cost > limit then
      reason = 2
    elseif need > cap and cost > 0 then
      reason, retry = 1, idiv(need - cap + n - 1, n)
    else
      allowed = 1
      d = d + cost * p
    end
    remaining = math.max(0, idiv(cap - d - lent, p))
    if allowed == 1 and want > 0 and remaining - want >= idiv(limit, 2) then
      local mine = false
      for _, it in ipairs(st.ledger) do
        if it.h == holder then mine = true end
      end
      if not mine then
        -- A new lease's seq is above those of the leases on the key,
        -- the one just ended included, so that no late report of an
        -- earlier lease matches it.
        newseq = math.max(now, seq + 1)
        for _, it in ipairs(st.ledger) do
          if it.s >= newseq then newseq = it.s + 1 end
        end
        local amt, c = want, 0
        if carry then
          -- Extended: the same lease, with its charged count.
          amt, newseq, c, carry = amt + carry.amt, carry.s, carry.c, nil
        end
        st.ledger[#st.ledger + 1] = {h = holder, amt = amt, e = now + lease, s = newseq, c = c}
        st.lent, st.dirty = st.lent + want, true
        granted, lent = want, lent + want * p
        remaining = remaining - want
      end
    end
    if carry then
      -- Extended without new units: the lease goes on as it was, less
      -- what was charged.
      st.ledger[#st.ledger + 1] = carry
      newseq, carry = carry.s, nil
    end
    if d + lent > 0 then reset = idiv(d + lent + n - 1, n) end
    if allowed == 1 and cost > 0 then
      st.dirty = true
      if alg == 1 then
        st.a, st.b = d, t
      else
        local q = idiv(d, n)
        st.a, st.b = now + q, d - q * n
      end
    end
    if st.dirty then
      -- The state's own debt rests at rest_us; every live lease may yet
      -- be charged at its end, so the key stays until that has drained.
      local rest
      if alg == 1 then
        st.val = string.format('%d %d', st.a, st.b)
        rest = st.b - now + idiv(st.a + n - 1, n)
      else
        if st.b == 0 then st.val = string.format('%d', st.a) else st.val = string.format('%d %d', st.a, st.b) end
        rest = st.a - now + 1
      end
      local last = now
      for _, it in ipairs(st.ledger) do
        if it.e > last then last = it.e end
      end
      if #st.ledger > 0 then
        st.val = st.val .. tail(st)
        rest = math.max(rest, last - now + reset)
      end
      st.px = math.max(1, idiv(rest + 999, 1000)) + slack
    end
  end
  if st.val and not st.queued then
    st.queued = true
    order[#order + 1] = key
  end
  out[#out + 1] = string.format('%d %d %d %d %d %d %d %d', allowed, reason, remaining, retry, reset,
    granted, newseq, now)
end

for _, key in ipairs(order) do
  local st = states[key]
  redis.call('SET', key, st.val, 'PX', st.px)
end
return table.concat(out, ' ')
