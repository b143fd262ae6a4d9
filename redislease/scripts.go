package redislease

import "github.com/redis/go-redis/v9"

// Script results. The lease scripts answer with one integer so that the Go
// side maps them to typed errors without parsing error strings.
const (
	resultMissing  = -1 // the partition marker is absent: the store lost it or never had it
	resultConflict = 0  // another owner holds the lease, or the caller does not
	resultOK       = 1
)

// Every script that reads TIME and then writes first asks for effects
// replication. Redis 5 and later always replicate effects and treat the call
// as a no-op; Redis 3.2 and 4 refuse a write after TIME without it.
const replicateEffects = `if redis.replicate_commands then redis.replicate_commands() end
`

// nowMillis reads the server's clock, so that demand expiry never depends on
// the clocks of the instances that publish and read it.
const nowMillis = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// provisionScript adds partitions 0..ARGV[1]-1 to the partition set
// KEYS[1]. It answers whether the set (our "container") had to be created and
// one character per partition: '1' created, '0' already there. When it
// created the set and ARGV[2] is above zero, it blocks each partition it
// created with a placeholder lease (KEYS[i+2] for partition i) of ARGV[2]
// milliseconds, so that leases granted before the store lost its data have
// ended before new ones are granted.
var provisionScript = redis.NewScript(`
local created = 0
if redis.call('EXISTS', KEYS[1]) == 0 then created = 1 end
local hold = tonumber(ARGV[2])
local flags = {}
for i = 0, tonumber(ARGV[1]) - 1 do
  local added = redis.call('SADD', KEYS[1], i)
  if added == 1 and created == 1 and hold > 0 then
    redis.call('SET', KEYS[i + 2], ARGV[3], 'NX', 'PX', hold)
  end
  flags[#flags + 1] = tostring(added)
end
return {created, table.concat(flags)}
`)

// acquireScript takes the lease KEYS[2] on partition ARGV[1] for owner
// ARGV[2] for ARGV[3] milliseconds, measured by the server. The existence
// check comes first so that a store that came back empty answers "missing"
// instead of handing out a lease on a partition nobody provisioned. An owner
// that already holds the lease gets it extended, as Azure does for a repeated
// acquire with the same lease id.
var acquireScript = redis.NewScript(`
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return -1 end
if redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[3]) then return 1 end
if redis.call('GET', KEYS[2]) == ARGV[2] then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return 1
end
return 0
`)

// renewScript extends the lease KEYS[2] to ARGV[3] milliseconds from now,
// only when owner ARGV[2] holds it.
var renewScript = redis.NewScript(`
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return -1 end
if redis.call('GET', KEYS[2]) ~= ARGV[2] then return 0 end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
`)

// renewBatchScript renews, for owner ARGV[1], each lease KEYS[2..] to
// ARGV[2] milliseconds from now, the lease of partition ARGV[i+1] for
// KEYS[i]; it answers one result per lease as renewScript would.
var renewBatchScript = redis.NewScript(`
local out = {}
for i = 2, #KEYS do
  if redis.call('SISMEMBER', KEYS[1], ARGV[i + 1]) == 0 then
    out[i - 1] = -1
  elseif redis.call('GET', KEYS[i]) ~= ARGV[1] then
    out[i - 1] = 0
  else
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
    out[i - 1] = 1
  end
end
return out
`)

// releaseScript deletes the lease KEYS[2], only when owner ARGV[2] holds it.
var releaseScript = redis.NewScript(`
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return -1 end
if redis.call('GET', KEYS[2]) ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[2])
return 1
`)

// publishScript records in the demand hash KEYS[1] that owner ARGV[1] wants
// ARGV[2] partitions until the server's now + ARGV[3] milliseconds. The hash
// itself expires no sooner than its longest-lived record, so a resource that
// every instance left does not keep a key forever.
var publishScript = redis.NewScript(replicateEffects + nowMillis + `
local ttl = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. string.format('%.0f', now + ttl))
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1
`)

// snapshotScript reads, at one instant of the server's clock, which of the
// partitions exist (set KEYS[1]) and which are leased (KEYS[3..], the lease
// keys of partitions 0..n-1 in order), and the live records of the demand
// hash KEYS[2], deleting the records that lapsed. It answers a string with
// one character per partition ('0' missing, '1' free, '2' leased) followed by
// owner, partitions pairs.
var snapshotScript = redis.NewScript(replicateEffects + nowMillis + `
local states = {}
for i = 3, #KEYS do
  if redis.call('SISMEMBER', KEYS[1], i - 3) == 0 then
    states[#states + 1] = '0'
  elseif redis.call('EXISTS', KEYS[i]) == 1 then
    states[#states + 1] = '2'
  else
    states[#states + 1] = '1'
  end
end
local out = {table.concat(states)}
local fields = redis.call('HGETALL', KEYS[2])
for j = 1, #fields, 2 do
  local n, exp = string.match(fields[j + 1], '^(%d+):(%d+)$')
  if n and tonumber(exp) > now then
    out[#out + 1] = fields[j]
    out[#out + 1] = n
  else
    redis.call('HDEL', KEYS[2], fields[j])
  end
end
return out
`)
