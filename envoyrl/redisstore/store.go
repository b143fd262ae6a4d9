// Package redisstore keeps envoyrl's fixed-window counters in Redis, a
// single server or a Redis Cluster, through go-redis v9.
//
// Counters are named as envoyproxy/ratelimit names them, and each lives
// until the end of its window plus a grace (envoyrl.Options.KeyGrace), not
// the window plus up to 300 s of jitter.
//
// Decisions that arrive together share round trips: a few workers each take
// whatever decisions are waiting, add up the hits per counter, and send one
// script call per hash slot (one in all on a single server), which adds to
// each counter with INCRBY and sets its expiry when the counter is new. The
// result for each decision is what it would have seen had the additions
// been made one after another, so the numbers are those of one INCRBY per
// descriptor.
package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/envoyrl"
)

// addScript adds ARGV[i] to KEYS[i] and returns the values after the
// additions. ARGV[n+i] is the counter's expiry in milliseconds, negated
// when the counter probably exists already. A counter thought new is
// created by SET NX with its expiry (one command when it is new); one
// thought to exist is added to by INCRBY, its expiry set only if the
// INCRBY created it (one command when it exists). The guess only saves
// commands: either way the result is the same.
var addScript = redis.NewScript(`
local n = #KEYS
local out = {}
for i = 1, n do
  local hits = tonumber(ARGV[i])
  local ttl = tonumber(ARGV[n + i])
  if ttl < 0 then
    local v = redis.call('INCRBY', KEYS[i], hits)
    if v == hits then
      redis.call('PEXPIRE', KEYS[i], -ttl)
    end
    out[i] = v
  elseif redis.call('SET', KEYS[i], hits, 'NX', 'PX', ttl) then
    out[i] = hits
  else
    out[i] = redis.call('INCRBY', KEYS[i], hits)
  end
end
return out
`)

// maxKnown bounds the counters a store remembers having created; past it
// the memory starts afresh, which costs a few commands, not correctness.
const maxKnown = 1 << 16

// Options tune a Store.
type Options struct {
	// Workers is how many batches may be in flight at once; default 2.
	Workers int
	// MaxBatch caps the counters one batch carries; default 512.
	MaxBatch int
}

// Store is an envoyrl.Store on Redis. It is safe for concurrent use; Close
// stops its workers (not the client, which the caller owns).
type Store struct {
	client   redis.UniversalClient
	cluster  bool
	maxBatch int
	calls    chan *call
	stop     chan struct{}

	knownMu sync.Mutex
	known   map[string]int64 // counter -> Unix ms it expires; guarded by knownMu
	wg      sync.WaitGroup
	once    sync.Once
}

// call is one Add waiting for its batch. The worker owns items until it
// sends on done; a call whose caller left early (its context ended, or the
// store closed) is never reused, since its batch may still write to it.
type call struct {
	items []item
	err   error
	done  chan struct{} // buffered: the worker never waits for the caller
}

// item is one counter of a call.
type item struct {
	key   string
	hits  uint64
	ttl   time.Duration
	count uint64
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// New returns a store on client and starts its workers. A *redis.ClusterClient
// is driven slot by slot.
func New(client redis.UniversalClient, opts Options) *Store {
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 512
	}
	_, cluster := client.(*redis.ClusterClient)
	s := &Store{
		client:   client,
		cluster:  cluster,
		maxBatch: opts.MaxBatch,
		calls:    make(chan *call, 4*opts.MaxBatch),
		stop:     make(chan struct{}),
		known:    map[string]int64{},
	}
	s.wg.Add(opts.Workers)
	for range opts.Workers {
		go s.work()
	}
	return s
}

// ErrClosed is returned by a store after Close.
var ErrClosed = errors.New("redisstore: closed")

// Close stops the workers after the batches in flight; it is idempotent.
func (s *Store) Close() error {
	s.once.Do(func() { close(s.stop) })
	s.wg.Wait()
	return nil
}

// Add implements envoyrl.Store.
func (s *Store) Add(ctx context.Context, counters []envoyrl.Counter) error {
	c := callPool.Get().(*call)
	c.err = nil
	c.items = c.items[:0]
	for _, k := range counters {
		c.items = append(c.items, item{key: k.Key, hits: k.Hits, ttl: k.TTL})
	}
	select {
	case s.calls <- c:
	case <-s.stop:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-c.done:
	case <-s.stop:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	err := c.err
	if err == nil {
		for i := range counters {
			counters[i].Count = c.items[i].count
		}
	}
	clear(c.items) // drop the keys
	callPool.Put(c)
	return err
}

// Get implements envoyrl.Store with one pipeline of GETs.
func (s *Store) Get(ctx context.Context, counters []envoyrl.Counter) error {
	cmds := make([]*redis.StringCmd, len(counters))
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range counters {
			cmds[i] = p.Get(ctx, c.Key)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for i, cmd := range cmds {
		n, err := cmd.Uint64()
		switch {
		case errors.Is(err, redis.Nil):
			n = 0
		case err != nil:
			return err
		}
		counters[i].Count = n
	}
	return nil
}

// work runs batches until Close.
func (s *Store) work() {
	defer s.wg.Done()
	var batch []*call
	for {
		select {
		case <-s.stop:
			return
		case c := <-s.calls:
			batch = append(batch[:0], c)
		}
		n := len(batch[0].items)
	drain:
		for n < s.maxBatch {
			select {
			case c := <-s.calls:
				batch = append(batch, c)
				n += len(c.items)
			default:
				break drain
			}
		}
		s.run(batch)
		clear(batch)
	}
}

// group is the counters of one hash slot in a batch, each key once.
type group struct {
	keys  []string
	args  []any // hits, then TTLs in milliseconds
	total []uint64
	out   []uint64
}

// run sends one batch and answers its calls.
func (s *Store) run(batch []*call) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	groups, where := s.plan(batch)
	err := s.exec(ctx, groups)
	// Each call's counter sees the value its own addition left, as if the
	// batch's additions had been made one after another in batch order.
	seen := make(map[[2]int]uint64, len(where))
	for _, c := range batch {
		c.err = err
		if err == nil {
			for i := range c.items {
				it := &c.items[i]
				at := where[it.key]
				g := &groups[at[0]]
				before := seen[at] // hits added ahead of this one in the batch
				it.count = g.out[at[1]] - g.total[at[1]] + before + it.hits
				seen[at] = before + it.hits
			}
		}
		c.done <- struct{}{}
	}
}

// plan groups a batch's counters by slot, summing the hits per key; where
// maps a key to its group and index.
func (s *Store) plan(batch []*call) ([]group, map[string][2]int) {
	where := map[string][2]int{}
	slots := map[uint16]int{}
	var groups []group
	var ttls [][]time.Duration
	for _, c := range batch {
		for _, it := range c.items {
			k := it.key
			if at, ok := where[k]; ok {
				groups[at[0]].total[at[1]] += it.hits
				ttls[at[0]][at[1]] = max(ttls[at[0]][at[1]], it.ttl)
				continue
			}
			var slot uint16
			if s.cluster {
				slot = Slot(k)
			}
			gi, ok := slots[slot]
			if !ok {
				gi = len(groups)
				slots[slot] = gi
				groups = append(groups, group{})
				ttls = append(ttls, nil)
			}
			g := &groups[gi]
			where[k] = [2]int{gi, len(g.keys)}
			g.keys = append(g.keys, k)
			g.total = append(g.total, it.hits)
			ttls[gi] = append(ttls[gi], it.ttl)
		}
	}
	for gi := range groups {
		g := &groups[gi]
		g.args = make([]any, 0, 2*len(g.keys))
		for _, h := range g.total {
			g.args = append(g.args, h)
		}
		for _, t := range ttls[gi] {
			g.args = append(g.args, t.Milliseconds())
		}
	}
	s.guess(groups)
	return groups, where
}

// guess negates the TTL argument of the counters this store created and
// that have not expired since, so that the script adds to them directly,
// and remembers the others as created.
func (s *Store) guess(groups []group) {
	now := time.Now().UnixMilli()
	s.knownMu.Lock()
	defer s.knownMu.Unlock()
	if len(s.known) > maxKnown {
		clear(s.known)
	}
	for gi := range groups {
		g := &groups[gi]
		for i, k := range g.keys {
			ttl := g.args[len(g.keys)+i].(int64)
			if s.known[k] > now {
				g.args[len(g.keys)+i] = -ttl
			} else {
				s.known[k] = now + ttl
			}
		}
	}
}

// exec runs every group's script call in one pipeline, loading the script
// where the server answers NOSCRIPT.
func (s *Store) exec(ctx context.Context, groups []group) error {
	cmds := make([]*redis.Cmd, len(groups))
	_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, g := range groups {
			cmds[i] = addScript.EvalSha(ctx, p, g.keys, g.args...)
		}
		return nil
	})
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			cmds[i] = addScript.Eval(ctx, s.client, groups[i].keys, groups[i].args...)
		}
		vals, err := cmds[i].Int64Slice()
		if err != nil {
			return err
		}
		out := make([]uint64, len(vals))
		for j, v := range vals {
			out[j] = uint64(v)
		}
		groups[i].out = out
	}
	return nil
}
