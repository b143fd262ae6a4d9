package redislimit

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/redis/go-redis/v9"
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
type pending struct {
	key  string
	args [7]int64 // alg limit n p w cost now
	res  [5]int64 // allowed reason remaining retry_us reset_us
	err  error
	done chan struct{} // buffered: the batch never waits for the caller
}

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
		b.run(batch)
		clear(batch)
	}
}

// run sends one batch and answers its calls. The calls' own contexts bound
// how long each caller waits; the batch itself is bounded by the client's
// read and write timeouts and by batchTimeout.
func (b *batcher) run(batch []*pending) {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	keys := make([]string, len(batch))
	bp := bufPool.Get().(*[]byte)
	buf := (*bp)[:0]
	for i, p := range batch {
		keys[i] = p.key
		for j, x := range p.args {
			if i > 0 || j > 0 {
				buf = append(buf, ' ')
			}
			buf = strconv.AppendInt(buf, x, 10)
		}
	}
	res, err := allowScript.Run(ctx, b.s.client, keys, string(buf)).Text()
	*bp = buf
	bufPool.Put(bp)
	if err != nil {
		err = b.s.failure(ctx, "allow", keys, err)
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

// allowBatched decides r in the next batch and waits for it or for ctx.
func (s *Store) allowBatched(ctx context.Context, r limit.Request, u policyUnits) (limit.Decision, error) {
	if err := ctx.Err(); err != nil {
		return limit.Decision{}, err // not queued: an ended call spends nothing
	}
	p := pendingPool.Get().(*pending)
	p.key = s.Key(r.Key, r.Policy)
	p.args = [7]int64{u.alg, u.limit, u.n, u.p, u.w, r.Cost, s.now()}
	p.err = nil
	s.batch.submit(p)
	select {
	case <-p.done:
	case <-ctx.Done():
		return limit.Decision{}, ctx.Err() // p stays with its batch
	}
	if p.err != nil {
		err := p.err
		pendingPool.Put(p)
		return limit.Decision{}, err
	}
	v := p.res
	pendingPool.Put(p)
	return limit.Decision{
		Allowed: v[0] == 1, Reason: limit.Reason(v[1]), Limit: r.Policy.Limit, Remaining: v[2],
		RetryAfter: time.Duration(v[3]) * time.Microsecond, ResetAfter: time.Duration(v[4]) * time.Microsecond,
		Policy: r.Policy.Name,
	}, nil
}

// batchable reports whether client runs one script over any keys: a
// single server (or a Sentinel failover client), not a cluster or a ring,
// where a batch would span slots or shards.
func batchable(client redis.Scripter) bool {
	_, ok := client.(*redis.Client)
	return ok
}
