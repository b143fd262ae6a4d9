package redislimit

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"math"
	"sync"
	"time"

	"github.com/costwise/batcher/limit"
)

// Local allowances (Options.LocalAllowance; DESIGN-allowances.md): a token
// bucket or GCRA key decided often at this store spends from units taken
// out of its Redis state in one script call, which records them as lent.

const (
	defaultAllowanceLease = 500 * time.Millisecond
	hotThreshold          = 4     // decisions in one period that make a key hot
	maxSeen               = 65536 // cold keys counted per period
	defaultMaxAllowances  = 4096
)

// allowances are a store's local allowances.
type allowances struct {
	s      *Store
	holder string
	lease  time.Duration
	max    int

	mu     sync.Mutex
	recs   map[string]*allowance // by Redis key
	seen   map[string]int32      // decisions per cold key in this period
	period time.Time
	closed bool
	stop   chan struct{}
	done   chan struct{}
}

// allowance is one key's allowance at this store.
type allowance struct {
	mu        sync.Mutex
	key       string
	p         limit.Policy
	closed    bool
	seq       int64     // the lease; 0 for none
	remaining int64     // units left to spend
	used      int64     // units spent since the last report
	deadline  time.Time // local; nothing is spent at or after it
	sent      time.Time // local time the last call was sent
	server    int64     // the server's time of that call, µs
	lastSpend time.Time
	lastUse   time.Time
	decisions int64 // cost decided since the last call, for the rate
	holders   int64
	notBefore time.Time // local refusals until then
	srvRemain int64     // what the last call said remains in Redis
	reset     time.Duration
}

func newAllowances(s *Store, lease time.Duration, max int) *allowances {
	var id [7]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	a := &allowances{s: s, holder: base32.HexEncoding.WithPadding(base32.NoPadding).EncodeToString(id[:]),
		lease: lease, max: max, recs: map[string]*allowance{}, seen: map[string]int32{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go a.sweep()
	return a
}

func (a *allowances) now() time.Time {
	if a.s.clock != nil {
		return a.s.clock.Now()
	}
	return time.Now()
}

// get returns key's allowance, making one when the key has become hot, or
// nil: the decision takes the one-trip path.
func (a *allowances) get(rk, key string, p limit.Policy) *allowance {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	if r := a.recs[rk]; r != nil {
		return r
	}
	now := a.now()
	if now.Sub(a.period) >= a.lease/2 || len(a.seen) >= maxSeen {
		clear(a.seen)
		a.period = now
	}
	a.seen[rk]++
	if a.seen[rk] < hotThreshold || len(a.recs) >= a.max {
		return nil
	}
	delete(a.seen, rk)
	r := &allowance{key: key, p: p, lastUse: now}
	a.recs[rk] = r
	return r
}

// decide decides cost from r; ok false sends the decision on the one-trip
// path.
func (a *allowances) decide(ctx context.Context, r *allowance, cost int64) (dec limit.Decision, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || cost > r.p.Limit {
		return limit.Decision{}, false
	}
	now := a.now()
	r.lastUse = now
	r.decisions += cost
	if !now.Before(r.deadline) {
		r.remaining = 0 // the lease may have ended in Redis: spend nothing more
	}
	if r.remaining < cost {
		if now.Before(r.notBefore) {
			return r.decision(false, r.notBefore.Sub(now)), true
		}
		if err := a.call(ctx, r, lendTake, now, cost); err != nil {
			return limit.Decision{}, false // the one-trip path, and its failure policy
		}
		if r.remaining < cost {
			return r.decision(false, r.notBefore.Sub(now)), true
		}
	}
	r.remaining -= cost
	r.used += cost
	r.lastSpend = now
	return r.decision(true, 0), true
}

func (r *allowance) decision(allowed bool, retry time.Duration) limit.Decision {
	d := limit.Decision{Allowed: allowed, Limit: r.p.Limit, Remaining: r.remaining + r.srvRemain,
		ResetAfter: r.reset, Policy: r.p.Name}
	if !allowed {
		d.Reason, d.RetryAfter = limit.ReasonLimited, max(retry, time.Microsecond)
	}
	return d
}

// call runs the allowance script for r (held locked): a renewal asking for
// at least cost units, or a return.
func (a *allowances) call(ctx context.Context, r *allowance, op int, now time.Time, cost int64) error {
	spentAt := int64(-1)
	if r.used > 0 && r.seq != 0 {
		spentAt = r.server + r.lastSpend.Sub(r.sent).Microseconds() + 1
	}
	want := int64(0)
	if op == lendTake {
		rate := float64(r.decisions) / max(now.Sub(r.sent).Seconds(), 1e-3) // cost units a second
		if r.sent.IsZero() {
			rate = float64(hotThreshold*cost) / (a.lease / 2).Seconds()
		}
		want = int64(math.Ceil(rate * (a.lease / 2).Seconds() * 1.25))
		share := r.p.Limit / (2 * max(r.holders, 1))
		want = max(min(want, share), cost, 1)
	}
	res, err := a.s.lend(ctx, r.key, r.p, lendRequest{op: op, holder: a.holder, seq: r.seq, used: r.used,
		spentAt: spentAt, want: want, lease: a.lease})
	if err != nil {
		return err
	}
	r.used, r.decisions, r.sent, r.server = 0, 0, now, res.now
	r.seq, r.holders, r.srvRemain, r.reset = res.seq, res.holders, res.remaining, res.reset
	if res.seq == 0 || op == lendReturn {
		r.remaining, r.seq = 0, 0
	} else {
		r.remaining += res.granted
		margin := max(time.Millisecond, res.lease/1000)
		r.deadline = now.Add(res.lease - margin)
	}
	r.notBefore = time.Time{}
	if res.retry > 0 {
		r.notBefore = now.Add(res.retry)
	}
	return nil
}

// giveBack returns r's units and closes it: later decisions on its key
// make a new allowance or take the one-trip path.
func (a *allowances) giveBack(ctx context.Context, r *allowance) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	if r.seq == 0 {
		return nil
	}
	return a.call(ctx, r, lendReturn, a.now(), 0)
}

// drop gives back the allowance of rk, if any, before a decision that
// must see the Redis state alone (AllowAll, CountAll, Settle, Reset).
func (a *allowances) drop(ctx context.Context, rk string) error {
	a.mu.Lock()
	r := a.recs[rk]
	delete(a.recs, rk)
	a.mu.Unlock()
	if r == nil {
		return nil
	}
	return a.giveBack(ctx, r)
}

// sweep gives back the allowances of keys that cooled: no decision for a
// lease.
func (a *allowances) sweep() {
	defer close(a.done)
	t := time.NewTicker(a.lease / 2)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
		}
		now := a.now()
		var cold []*allowance
		a.mu.Lock()
		for rk, r := range a.recs {
			// A record locked is in use (perhaps waiting for Redis): not
			// cold, and not to be waited for with a.mu held.
			if !r.mu.TryLock() {
				continue
			}
			if now.Sub(r.lastUse) >= a.lease {
				cold = append(cold, r)
				delete(a.recs, rk)
			}
			r.mu.Unlock()
		}
		a.mu.Unlock()
		for _, r := range cold {
			ctx, cancel := context.WithTimeout(context.Background(), a.lease)
			_ = a.giveBack(ctx, r) // on failure the lease ends in Redis on its own
			cancel()
		}
	}
}

// close stops the sweep and gives every allowance back.
func (a *allowances) close(ctx context.Context) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	recs := a.recs
	a.recs = map[string]*allowance{}
	a.mu.Unlock()
	close(a.stop)
	<-a.done
	var first error
	for _, r := range recs {
		if err := a.giveBack(ctx, r); err != nil && first == nil {
			first = err
		}
	}
	return first
}
