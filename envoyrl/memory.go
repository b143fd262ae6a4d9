package envoyrl

import (
	"context"
	"errors"
	"hash/maphash"
	"strings"
	"sync"
	"time"
)

// MemoryStore is a Store in this process's memory: counters in a
// power-of-two number of shards, each a map under its own lock. A counter
// is dropped once its TTL has passed; a sweeper started by
// NewMemoryStore visits one shard at a time, so no lock is held for long.
// With MaxCounters, a shard holds at most its share of them; a new counter
// that finds its shard full, even after the shard's expired counters are
// dropped, fails Add with ErrTooManyCounters, and the counters already
// held keep counting.
// It is safe for concurrent use; Close stops the sweeper.
type MemoryStore struct {
	seed     maphash.Seed
	perShard int // most counters a shard holds; 0: no bound
	shards   []memShard
	mask     uint64
	now      func() time.Time
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
}

type memShard struct {
	mu       sync.Mutex
	m        map[string]*memCounter // guarded by mu; pointers, so that a count changes without a map write, which would store the caller's key string
	lastDrop int64                  // guarded by mu: when a full shard last dropped its expired counters
	_        [32]byte               // keeps neighbouring shards' locks off one cache line
}

// ErrTooManyCounters is Add's error when a new counter finds its shard of
// a MemoryStore full.
var ErrTooManyCounters = errors.New("envoyrl: memory store: too many counters")

type memCounter struct {
	count   uint64
	expires int64 // Unix nanoseconds
}

// MemoryOptions tune a MemoryStore.
type MemoryOptions struct {
	// Shards is the number of shards, a power of two; default 256.
	Shards int
	// SweepInterval is how often expired counters are dropped; default 10 s.
	SweepInterval time.Duration
	// Now is the store's clock; time.Now by default.
	Now func() time.Time
	// MaxCounters bounds the counters held, each shard holding at most
	// its share (MaxCounters/Shards, rounded up). Zero means no bound.
	MaxCounters int
}

// NewMemoryStore returns an empty store and starts its sweeper. Shards that
// is not a power of two is refused.
func NewMemoryStore(opts MemoryOptions) (*MemoryStore, error) {
	if opts.Shards == 0 {
		opts.Shards = 256
	}
	if opts.Shards < 0 || opts.Shards&(opts.Shards-1) != 0 {
		return nil, &ConfigError{"memory store", "shards must be a power of two"}
	}
	if opts.MaxCounters < 0 {
		return nil, &ConfigError{"memory store", "max counters must be 0 or more"}
	}
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = 10 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &MemoryStore{
		seed:     maphash.MakeSeed(),
		shards:   make([]memShard, opts.Shards),
		perShard: (opts.MaxCounters + opts.Shards - 1) / opts.Shards,
		mask:     uint64(opts.Shards - 1),
		now:      opts.Now,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	for i := range s.shards {
		s.shards[i].m = map[string]*memCounter{}
	}
	go s.sweepLoop(opts.SweepInterval)
	return s, nil
}

func (s *MemoryStore) shard(key string) *memShard {
	return &s.shards[maphash.String(s.seed, key)&s.mask]
}

// Add implements Store.
func (s *MemoryStore) Add(ctx context.Context, counters []Counter) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.now().UnixNano()
	for i := range counters {
		c := &counters[i]
		sh := s.shard(c.Key)
		sh.mu.Lock()
		v, ok := sh.m[c.Key]
		if !ok {
			if !s.room(sh, now) {
				sh.mu.Unlock()
				return ErrTooManyCounters
			}
			// The store keeps its own copy: a key cut from a larger
			// buffer must not keep the buffer alive.
			v = &memCounter{expires: now + int64(c.TTL)}
			sh.m[strings.Clone(c.Key)] = v
		} else if v.expires <= now {
			*v = memCounter{expires: now + int64(c.TTL)}
		}
		v.count += c.Hits
		c.Count = v.count
		sh.mu.Unlock()
	}
	return nil
}

// room reports whether sh may take a new counter, dropping its expired
// counters first when it is full, at most once a second so that a flood of
// new keys does not turn every Add into a scan. It needs sh.mu.
func (s *MemoryStore) room(sh *memShard, now int64) bool {
	if s.perShard == 0 || len(sh.m) < s.perShard {
		return true
	}
	if now-sh.lastDrop < int64(time.Second) {
		return false
	}
	sh.lastDrop = now
	for k, v := range sh.m {
		if v.expires <= now {
			delete(sh.m, k)
		}
	}
	return len(sh.m) < s.perShard
}

// Get implements Store.
func (s *MemoryStore) Get(ctx context.Context, counters []Counter) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.now().UnixNano()
	for i := range counters {
		c := &counters[i]
		sh := s.shard(c.Key)
		sh.mu.Lock()
		v, ok := sh.m[c.Key]
		sh.mu.Unlock()
		c.Count = 0
		if ok && v.expires > now {
			c.Count = v.count
		}
	}
	return nil
}

// Len returns the number of counters held, expired ones not yet swept
// included.
func (s *MemoryStore) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// Sweep drops the counters whose TTL has passed, one shard at a time.
func (s *MemoryStore) Sweep() {
	for i := range s.shards {
		sh := &s.shards[i]
		now := s.now().UnixNano()
		sh.mu.Lock()
		for k, v := range sh.m {
			if v.expires <= now {
				delete(sh.m, k)
			}
		}
		sh.mu.Unlock()
	}
}

func (s *MemoryStore) sweepLoop(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep()
		}
	}
}

// Close stops the sweeper and waits for it; it is idempotent.
func (s *MemoryStore) Close() error {
	s.once.Do(func() { close(s.stop) })
	<-s.done
	return nil
}
