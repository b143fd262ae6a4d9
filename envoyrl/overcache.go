package envoyrl

import (
	"hash/maphash"
	"sync"
)

// overCache remembers the counters found over their limit until their
// window ends, so that the next calls on them are answered OVER_LIMIT
// without the store (envoyproxy/ratelimit's local cache). It holds at most
// its budget of bytes, a key costing its length plus overEntryBytes; a
// full shard forgets its oldest keys first. It is safe for concurrent use.
type overCache struct {
	seed   maphash.Seed
	shards [overShards]overShard
	budget int64 // bytes per shard
}

// overShards is the number of shards, each with its lock and its share of
// the budget.
const overShards = 16

// overEntryBytes is what a cached key costs besides its bytes: its map
// entry, its string header, its place in the order, and the slack of the
// map's and the order's growth. With it the heap the cache takes stays
// within its budget (measured: 1, 8 and 64 MiB holding keys of 40 bytes
// took 1.0, 8.0 and 61 MiB).
const overEntryBytes = 112

type overShard struct {
	mu    sync.Mutex
	ends  map[string]int64 // key -> the end of its window, Unix seconds; guarded by mu
	order []string         // the keys of ends, oldest first from head; guarded by mu
	head  int
	used  int64
	_     [40]byte // keeps neighbouring shards' locks off one cache line
}

// newOverCache returns a cache of at most bytes bytes; nil when bytes is
// not positive.
func newOverCache(bytes int64) *overCache {
	if bytes <= 0 {
		return nil
	}
	c := &overCache{seed: maphash.MakeSeed(), budget: bytes / overShards}
	for i := range c.shards {
		c.shards[i].ends = map[string]int64{}
	}
	return c
}

func (c *overCache) shard(key string) *overShard {
	return &c.shards[maphash.String(c.seed, key)%overShards]
}

// over reports whether key was found over its limit in a window that has
// not ended at now (Unix seconds).
func (c *overCache) over(key string, now int64) bool {
	sh := c.shard(key)
	sh.mu.Lock()
	end, ok := sh.ends[key]
	sh.mu.Unlock()
	return ok && end > now
}

// add remembers key as over its limit until end (Unix seconds).
func (c *overCache) add(key string, end int64) {
	cost := int64(len(key)) + overEntryBytes
	if cost > c.budget {
		return
	}
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.ends[key]; ok {
		sh.ends[key] = end
		return
	}
	for sh.used+cost > c.budget && sh.head < len(sh.order) {
		old := sh.order[sh.head]
		sh.order[sh.head] = ""
		sh.head++
		delete(sh.ends, old)
		sh.used -= int64(len(old)) + overEntryBytes
	}
	if sh.head > 0 && sh.head >= len(sh.order)/2 {
		n := copy(sh.order, sh.order[sh.head:])
		clear(sh.order[n:])
		sh.order, sh.head = sh.order[:n], 0
	}
	sh.ends[key] = end
	sh.order = append(sh.order, key)
	sh.used += cost
}

// len returns the number of keys held, expired ones not yet forgotten
// included.
func (c *overCache) len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += len(sh.ends)
		sh.mu.Unlock()
	}
	return n
}
