package redislimit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/internal/batchctx"
	"github.com/costwise/batcher/limit"
)

// Defaults of the options that shape batches.
const (
	defaultMaxInFlight = 2
	defaultMaxBatch    = 256
)

// pending is one AllowN waiting for, or carried by, a batch. The batch that
// carries it owns res and err until it sends on done; the caller reads them
// after receiving. A pending whose caller left early (its context ended) is
// never reused: its batch may still write to it.
//
// state says who has it: queued until a batch takes it (taken) or it is
// dropped, by its caller leaving or by the batch finding its context
// ended; whichever moves it from queued first decides, so a dropped call
// is never sent.
type pending struct {
	ctx   context.Context
	state atomic.Int32
	key   string
	args  [12]int64 // alg limit n p w cost now, then the lend: want lease_us seq used spent_at
	res   [8]int64  // allowed reason remaining retry_us reset_us granted seq now
	err   error
	done  chan struct{} // buffered: the batch never waits for the caller
	// lateFor, when above 0, is how long the call's answer is wanted after
	// its caller leaves (Store.allowFastLate): its batch lasts that long
	// at least.
	lateFor time.Duration
}

// The states of a pending.
const (
	queued int32 = iota
	taken
	dropped
)

var pendingPool = sync.Pool{New: func() any { return &pending{done: make(chan struct{}, 1)} }}

// batcher groups the AllowN calls made while earlier batches are in flight
// into one script call each, so that concurrent callers share round trips
// (one MGET and one TIME per batch, then a SET per changed key). At most
// maxInFlight batches run at once; each runs in a goroutine that takes the
// waiting calls until none are left, then ends, so an idle store runs no
// goroutine and needs no Close.
type batcher struct {
	s           *Store
	maxInFlight int
	maxBatch    int

	mu       sync.Mutex
	queue    []*pending // guarded by mu
	inFlight int        // goroutines running batches; guarded by mu
}

// submit queues p and starts a batch goroutine when fewer than maxInFlight
// run.
func (b *batcher) submit(p *pending) {
	b.mu.Lock()
	b.queue = append(b.queue, p)
	start := b.inFlight < b.maxInFlight
	if start {
		b.inFlight++
	}
	b.mu.Unlock()
	if start {
		go b.drain()
	}
}

// drain runs batches until the queue is empty.
func (b *batcher) drain() {
	var batch []*pending
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.inFlight--
			b.mu.Unlock()
			return
		}
		n := min(len(b.queue), b.maxBatch)
		batch = append(batch[:0], b.queue[:n]...)
		rest := copy(b.queue, b.queue[n:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		b.mu.Unlock()
		if batch = take(batch); len(batch) > 0 {
			b.run(batch)
		}
		clear(batch)
	}
}

// abandon drops p for its caller, who leaves, unless a batch has taken it,
// and reports whether one has: p is on the wire. A p that a batch dropped
// (take), its context ended, was never sent.
func (p *pending) abandon() (sent bool) {
	return !p.state.CompareAndSwap(queued, dropped) && p.state.Load() == taken
}

// take keeps the calls of batch that are still wanted, marking them taken,
// and drops those whose callers left or whose contexts have ended: they
// are never sent.
func take(batch []*pending) []*pending {
	kept := batch[:0]
	for _, p := range batch {
		if p.ctx.Err() != nil {
			p.state.CompareAndSwap(queued, dropped)
			continue
		}
		if p.state.CompareAndSwap(queued, taken) {
			kept = append(kept, p)
		}
	}
	clear(batch[len(kept):])
	return kept
}

// Deadline is the pending's caller's deadline (batchctx.Deadliner), and at
// least lateFor from now.
func (p *pending) Deadline() (time.Time, bool) {
	d, ok := p.ctx.Deadline()
	if ok && p.lateFor > 0 {
		if l := time.Now().Add(p.lateFor); l.After(d) {
			d = l
		}
	}
	return d, ok
}

// run sends one batch and answers its calls. The calls' own contexts bound
// how long each caller waits; the batch itself is bounded by the client's
// read and write timeouts and by batchContext.
func (b *batcher) run(batch []*pending) {
	ctx, cancel := batchctx.For(batch, batchTimeout)
	defer cancel()
	keys := make([]string, len(batch))
	bp := bufPool.Get().(*[]byte)
	buf := (*bp)[:0]
	for i, p := range batch {
		keys[i] = p.key
		for _, x := range p.args {
			buf = appendAllowArg(buf, x)
		}
	}
	b.s.stats.commands.Add(1)
	res, err := allowScript.Run(ctx, b.s.client, keys, string(buf), b.s.holder()).Text()
	*bp = buf
	bufPool.Put(bp)
	if err != nil {
		// The batch's context is none of its callers': its end is a
		// failure of the store, not a caller's deadline.
		err = b.s.failure(context.Background(), "allow", keys, err)
	}
	for _, p := range batch {
		p.err = err
		if err == nil {
			res, p.err = parseInts(res, p.res[:])
		}
		p.done <- struct{}{}
	}
}

// batchTimeout bounds one batch when the client's own timeouts are off.
const batchTimeout = 10 * time.Second

// allowBatched decides r in the next batch, with the lend ask, and waits
// for it or for ctx.
func (s *Store) allowBatched(ctx context.Context, r limit.Request, u policyUnits, ask lendAsk, late func([8]int64, error)) (limit.Decision, lendGrant, bool, error) {
	if err := ctx.Err(); err != nil {
		return limit.Decision{}, lendGrant{}, false, err // not queued: an ended call spends nothing
	}
	p := pendingPool.Get().(*pending)
	p.ctx = ctx
	p.state.Store(queued)
	p.key = s.Key(r.Key, r.Policy)
	p.args = [12]int64{u.alg, u.limit, u.n, u.p, u.w, r.Cost, s.now(), ask.want, ask.lease, ask.seq, ask.used, ask.spentAt}
	p.err = nil
	p.lateFor = 0
	if late != nil {
		p.lateFor = s.lent.lateFor()
	}
	s.batch.submit(p)
	select {
	case <-p.done:
	case <-ctx.Done():
		// Still queued: dropped, never sent, whether here or by the batch
		// that found its context ended (take). Taken: its batch is on the
		// wire and may spend it. Either way p stays with the batcher.
		if testHookCallerLeft != nil {
			testHookCallerLeft(s, func() bool { return p.state.Load() == queued })
		}
		if !p.abandon() || late == nil || !s.lent.reserveLate() {
			return limit.Decision{}, lendGrant{}, false, ctx.Err()
		}
		// On the wire: its answer goes to late, if it comes in time.
		go func() {
			defer s.lent.lateDone()
			if s.lent.awaitLate(p.done) {
				late(p.res, p.err) // p stays unused: the pool may not hold it
			} else {
				late([8]int64{}, errNoLateAnswer)
			}
		}()
		return limit.Decision{}, lendGrant{}, true, ctx.Err()
	}
	p.ctx = nil
	if p.err != nil {
		err := p.err
		pendingPool.Put(p)
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = ctxErr // the batch ended with the caller's deadline
		}
		return limit.Decision{}, lendGrant{}, false, err
	}
	v := p.res
	pendingPool.Put(p)
	dec, g := fastAnswer(r, v)
	return dec, g, false, nil
}

// fastAnswer reads one decision of allow.lua.
func fastAnswer(r limit.Request, v [8]int64) (limit.Decision, lendGrant) {
	return limit.Decision{
		Allowed: v[0] == 1, Reason: limit.Reason(v[1]), Limit: r.Policy.Limit, Remaining: v[2],
		RetryAfter: time.Duration(v[3]) * time.Microsecond, ResetAfter: time.Duration(v[4]) * time.Microsecond,
		Policy: r.Policy.Name,
	}, lendGrant{granted: v[5], seq: v[6], now: v[7]}
}

// batchable reports whether client runs one script over any keys: a
// single server (or a Sentinel failover client), not a cluster or a ring,
// where a batch would span slots or shards.
func batchable(client redis.Scripter) bool {
	_, ok := client.(*redis.Client)
	return ok
}
