// Package redisstore keeps envoyrl's fixed-window counters in Redis, a
// single server or a Redis Cluster, through go-redis v9.
//
// Counters are named as envoyproxy/ratelimit names them, and each lives
// until the end of its window plus a grace (envoyrl.Options.KeyGrace),
// plus a random jitter when Options.ExpirationJitter is set.
//
// Decisions that arrive together share round trips: a few workers each take
// whatever decisions are waiting, add up the hits per counter, and send one
// script call per hash slot (one in all on a single server), which adds to
// each counter with INCRBY and sets its expiry when the counter is new. The
// result for each decision is what it would have seen had the additions
// been made one after another, so the numbers are those of one INCRBY per
// descriptor.
//
// Every call returns when its context ends, whatever the client's own read
// and write timeouts. A call whose context has ended before a worker takes
// it into a batch is dropped and never sent. A batch already written to
// the connection cannot be recalled: if the server stops answering (a
// frozen or overloaded server), the calls of the batches in flight, at
// most Workers batches of MaxBatch counters, are counted when the server
// reads them, although their callers were answered with their context's
// error.
//
// With Options.LocalAllowance, a counter decided often at a store takes
// several of its window's units in one call and spends them locally; the
// counter includes them, so what all stores admit in a window stays within
// the limit (DESIGN-allowances.md). Its takes return by their context's
// end too, and Close by its bound, whatever the client's timeouts; a take
// or give-back still on the wire then is settled as a failed one.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/envoyrl"
	"github.com/costwise/batcher/internal/batchctx"
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
	// ExpirationJitter, when positive, adds a random 0 to ExpirationJitter
	// (whole milliseconds) to the expiry of each counter the store creates,
	// so that counters created together do not expire together
	// (envoyproxy/ratelimit's EXPIRATION_JITTER_MAX_SECONDS). Default 0.
	ExpirationJitter time.Duration
	// LocalAllowance lets a counter decided often at this store take
	// several of its window's units in one call and spend them here; the
	// counter includes them, so the sum admitted across stores stays
	// within the limit (DESIGN-allowances.md). Off by default.
	LocalAllowance bool
	// AllowancePeriod is the span an allowance is sized to last and the
	// sweep's interval; default 250ms.
	AllowancePeriod time.Duration
	// MaxAllowances caps the descriptors tracked for allowances; beyond
	// it, counters take the one-trip path. Default 4096.
	MaxAllowances int
	// Now is the allowances' clock; time.Now by default.
	Now func() time.Time
}

// Store is an envoyrl.Store on Redis. It is safe for concurrent use; Close
// stops its workers (not the client, which the caller owns).
type Store struct {
	client   redis.UniversalClient
	cluster  bool
	maxBatch int
	jitter   int64 // ExpirationJitter in milliseconds
	calls    chan *call
	stop     chan struct{}

	knownMu sync.Mutex
	known   map[string]int64 // counter -> Unix ms it expires; guarded by knownMu
	wg      sync.WaitGroup
	once    sync.Once
	lend    *lender // nil unless Options.LocalAllowance
}

// call is one Add waiting for its batch. The worker owns items until it
// sends on done; a call whose caller left early (its context ended, or the
// store closed) is never reused, since its batch may still write to it.
//
// state says who has it: queued until a worker takes it into a batch
// (taken) or it is dropped, by its caller leaving or by the worker finding
// its context ended; whichever moves it from queued first decides, so a
// dropped call is never sent.
type call struct {
	ctx   context.Context
	state atomic.Int32
	items []item
	err   error
	done  chan struct{} // buffered: the worker never waits for the caller
}

// The states of a call.
const (
	queued int32 = iota
	taken
	dropped
)

// take reports whether c is still wanted, marking it taken; a call whose
// caller left or whose context has ended is dropped.
func (c *call) take() bool {
	if c.ctx.Err() != nil {
		c.state.CompareAndSwap(queued, dropped)
		return false
	}
	return c.state.CompareAndSwap(queued, taken)
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
		jitter:   max(opts.ExpirationJitter.Milliseconds(), 0),
		calls:    make(chan *call, 4*opts.MaxBatch),
		stop:     make(chan struct{}),
		known:    map[string]int64{},
	}
	if opts.LocalAllowance {
		s.lend = newLender(s, opts)
	}
	s.wg.Add(opts.Workers)
	for range opts.Workers {
		go s.work()
	}
	return s
}

// ErrClosed is returned by a store after Close.
var ErrClosed = errors.New("redisstore: closed")

// Close gives back the units of the store's allowances (for at most
// closeTimeout), then stops the workers after the batches in flight; it is
// idempotent.
func (s *Store) Close() error {
	if s.lend != nil {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		s.lend.close(ctx)
		cancel()
	}
	s.once.Do(func() { close(s.stop) })
	s.wg.Wait()
	return nil
}

// closeTimeout bounds the give-backs of Close.
const closeTimeout = 2 * time.Second

// Add implements envoyrl.Store.
func (s *Store) Add(ctx context.Context, counters []envoyrl.Counter) error {
	if s.lend != nil {
		return s.lend.add(ctx, counters, s.add)
	}
	return s.add(ctx, counters)
}

// add counts on the one-trip path: batched INCRBYs.
func (s *Store) add(ctx context.Context, counters []envoyrl.Counter) error {
	if err := ctx.Err(); err != nil {
		return err // not queued: a call that has ended spends nothing
	}
	c := callPool.Get().(*call)
	c.ctx = ctx
	c.state.Store(queued)
	c.err = nil
	c.items = c.items[:0]
	for _, k := range counters {
		c.items = append(c.items, item{key: k.Key, hits: k.Hits, ttl: k.TTL})
	}
	// Most calls find room in the queue: a send that does not wait costs
	// less than the select with the store's stop and the context.
	select {
	case s.calls <- c:
	default:
		select {
		case s.calls <- c:
		case <-s.stop:
			return ErrClosed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	select {
	case <-c.done:
	case <-s.stop:
		return ErrClosed
	case <-ctx.Done():
		// Still queued: dropped, never sent. Taken: its batch may be on
		// the wire, and the server counts it when it reads it.
		c.state.CompareAndSwap(queued, dropped)
		return ctx.Err()
	}
	c.ctx = nil
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

// Get implements envoyrl.Store with one pipeline of GETs. It returns when
// ctx ends, whatever the client's own timeouts. A counter this store holds
// units of reads as its value less the units held.
func (s *Store) Get(ctx context.Context, counters []envoyrl.Counter) error {
	if s.lend != nil {
		return s.lend.get(ctx, counters, s.getPlain)
	}
	return s.getPlain(ctx, counters)
}

// getPlain reads every counter from Redis.
func (s *Store) getPlain(ctx context.Context, counters []envoyrl.Counter) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if ctx.Done() == nil {
		return s.get(ctx, counters)
	}
	// The pipeline reads into its own counters, so that a caller that left
	// does not find its slice written to later.
	own := make([]envoyrl.Counter, len(counters))
	copy(own, counters)
	_, err := bounded(ctx, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, s.get(ctx, own)
	})
	if err != nil {
		return err
	}
	for i := range counters {
		counters[i].Count = own[i].Count
	}
	return nil
}

// bounded runs call and returns by ctx's end, whatever the client's
// options: go-redis ends a read blocked on a server that does not answer
// by its ReadTimeout alone, unless ContextTimeoutEnabled. The call then
// goes on on its own goroutine until the client ends it, and its answer is
// dropped: what it read, took or gave back is settled as for a failed call.
func bounded[T any](ctx context.Context, call func(context.Context) (T, error)) (T, error) {
	if ctx.Done() == nil {
		return call(ctx)
	}
	type answer struct {
		v   T
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		v, err := call(ctx)
		ch <- answer{v, err}
	}()
	select {
	case a := <-ch:
		return a.v, a.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// get runs Get's pipeline.
func (s *Store) get(ctx context.Context, counters []envoyrl.Counter) error {
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
	w := newWorker(s)
	for {
		select {
		case <-s.stop:
			return
		case c := <-s.calls:
			if !c.take() {
				continue
			}
			batch = append(batch[:0], c)
		}
		n := len(batch[0].items)
	drain:
		for n < s.maxBatch {
			select {
			case c := <-s.calls:
				if c.take() {
					batch = append(batch, c)
					n += len(c.items)
				}
			default:
				break drain
			}
		}
		w.run(batch)
		clear(batch)
	}
}

// worker is one worker's memory, kept from batch to batch so that a batch
// allocates little: the counters of the batch, each key once, in the order
// first seen, and their hash slot groups.
type worker struct {
	s       *Store
	index   map[string]int // key -> its place in keys
	keys    []string
	total   []uint64        // hits on the key in the whole batch
	ttl     []time.Duration // the longest expiry asked for the key
	given   []uint64        // hits on the key handed out so far, in batch order
	out     []uint64        // the key's value after the batch
	slots   map[uint16]int  // slot -> its group (cluster only)
	groups  []group
	boxed   map[int64]any // expiries already converted to script arguments
	scratch []int64
}

// group is the counters of one hash slot in a batch: indexes into the
// worker's keys, and the script's keys and arguments for them.
type group struct {
	at   []int
	keys []string
	args []any // hits, then expiries in milliseconds
}

func newWorker(s *Store) *worker {
	return &worker{s: s, index: map[string]int{}, slots: map[uint16]int{}, boxed: map[int64]any{}}
}

// reset forgets the last batch, keeping the memory.
func (w *worker) reset() {
	clear(w.index)
	clear(w.keys) // drop the strings
	w.keys, w.total, w.ttl, w.given, w.out = w.keys[:0], w.total[:0], w.ttl[:0], w.given[:0], w.out[:0]
	clear(w.slots)
	for i := range w.groups {
		g := &w.groups[i]
		clear(g.keys)
		clear(g.args)
		g.at, g.keys, g.args = g.at[:0], g.keys[:0], g.args[:0]
	}
	w.groups = w.groups[:0]
	if len(w.boxed) > 256 {
		clear(w.boxed)
	}
}

// run sends one batch and answers its calls.
func (w *worker) run(batch []*call) {
	defer w.reset()
	ctx, cancel := batchctx.For(batch, batchTimeout)
	defer cancel()
	w.plan(batch)
	err := w.exec(ctx)
	// Each call's counter sees the value its own addition left, as if the
	// batch's additions had been made one after another in batch order.
	for _, c := range batch {
		c.err = err
		if err == nil {
			for i := range c.items {
				it := &c.items[i]
				k := w.index[it.key]
				w.given[k] += it.hits
				it.count = w.out[k] - w.total[k] + w.given[k]
			}
		}
		c.done <- struct{}{}
	}
}

// batchTimeout bounds a batch whose callers have no deadline.
const batchTimeout = 5 * time.Second

// Deadline is the call's caller's deadline (batchctx.Deadliner).
func (c *call) Deadline() (time.Time, bool) { return c.ctx.Deadline() }

// plan lists a batch's counters, each key once with its hits summed, and
// groups them by slot with their script arguments.
func (w *worker) plan(batch []*call) {
	for _, c := range batch {
		for _, it := range c.items {
			if k, ok := w.index[it.key]; ok {
				w.total[k] += it.hits
				w.ttl[k] = max(w.ttl[k], it.ttl)
				continue
			}
			w.index[it.key] = len(w.keys)
			w.keys = append(w.keys, it.key)
			w.total = append(w.total, it.hits)
			w.ttl = append(w.ttl, it.ttl)
			w.given = append(w.given, 0)
			w.out = append(w.out, 0)
		}
	}
	ttls := w.s.guess(w.keys, w.ttl, w.scratch[:0])
	w.scratch = ttls
	for k, key := range w.keys {
		gi := 0
		if w.s.cluster {
			slot := Slot(key)
			var ok bool
			if gi, ok = w.slots[slot]; !ok {
				gi = len(w.groups)
				w.slots[slot] = gi
			}
		}
		if gi == len(w.groups) {
			if len(w.groups) < cap(w.groups) {
				w.groups = w.groups[:gi+1]
			} else {
				w.groups = append(w.groups, group{})
			}
		}
		g := &w.groups[gi]
		g.at = append(g.at, k)
		g.keys = append(g.keys, key)
	}
	for gi := range w.groups {
		g := &w.groups[gi]
		for _, k := range g.at {
			g.args = append(g.args, w.total[k])
		}
		for _, k := range g.at {
			if j := w.s.jitter; j > 0 {
				g.args = append(g.args, jittered(ttls[k], j))
				continue
			}
			g.args = append(g.args, w.box(ttls[k]))
		}
	}
}

// jittered adds 0 to jitter milliseconds at random to an expiry argument,
// keeping its sign (see guess).
func jittered(ms, jitter int64) int64 {
	j := rand.Int64N(jitter + 1)
	if ms < 0 {
		return ms - j
	}
	return ms + j
}

// box returns ms as a script argument, converting each value once: the
// expiries of a batch are few distinct values (windows end together).
func (w *worker) box(ms int64) any {
	v, ok := w.boxed[ms]
	if !ok {
		v = ms
		w.boxed[ms] = v
	}
	return v
}

// guess appends to dst the expiry argument of each key: its expiry in
// milliseconds, negated for the counters this store created and that have
// not expired since, so that the script adds to them directly; it
// remembers the others as created.
func (s *Store) guess(keys []string, ttls []time.Duration, dst []int64) []int64 {
	now := time.Now().UnixMilli()
	s.knownMu.Lock()
	defer s.knownMu.Unlock()
	if len(s.known) > maxKnown {
		clear(s.known)
	}
	for i, k := range keys {
		ttl := ttls[i].Milliseconds()
		if s.known[k] > now {
			ttl = -ttl
		} else {
			s.known[k] = now + ttl
		}
		dst = append(dst, ttl)
	}
	return dst
}

// exec runs every group's script call, in one pipeline when there are
// several, loading the script where the server answers NOSCRIPT, and sets
// out.
func (w *worker) exec(ctx context.Context) error {
	c := w.s.client
	switch len(w.groups) {
	case 0:
		return nil
	case 1:
		g := &w.groups[0]
		cmd := addScript.EvalSha(ctx, c, g.keys, g.args...)
		return w.read(ctx, g, cmd)
	}
	cmds := make([]*redis.Cmd, len(w.groups))
	_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range w.groups {
			g := &w.groups[i]
			cmds[i] = addScript.EvalSha(ctx, p, g.keys, g.args...)
		}
		return nil
	})
	for i := range w.groups {
		if err := w.read(ctx, &w.groups[i], cmds[i]); err != nil {
			return err
		}
	}
	return nil
}

// read sets out from g's script call, running the script again with EVAL
// when the server did not know it.
func (w *worker) read(ctx context.Context, g *group, cmd *redis.Cmd) error {
	if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		cmd = addScript.Eval(ctx, w.s.client, g.keys, g.args...)
	}
	vals, err := cmd.Slice()
	if err != nil {
		return err
	}
	if len(vals) != len(g.at) {
		return fmt.Errorf("redisstore: the script answered %d values for %d counters", len(vals), len(g.at))
	}
	for j, v := range vals {
		n, ok := v.(int64)
		if !ok {
			return fmt.Errorf("redisstore: the script answered %T, not an integer", v)
		}
		w.out[g.at[j]] = uint64(n)
	}
	return nil
}
