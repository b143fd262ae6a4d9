package redislimit

import (
	"context"
	"time"

	"github.com/costwise/batcher/limit"
)

// Lease is the allowance script's answer, for the external tests.
type Lease struct {
	Granted, Seq, Holders, Remaining int64
	LeaseFor, Retry                  time.Duration
	Now                              int64
	Matched                          bool
}

// LendForTest runs the allowance script: take (ret false) or return.
func (s *Store) LendForTest(ctx context.Context, key string, p limit.Policy, holder string, ret bool,
	seq, used, spentAt, want int64, lease time.Duration) (Lease, error) {
	op := lendTake
	if ret {
		op = lendReturn
	}
	r, err := s.lend(ctx, key, p, lendRequest{op: op, holder: holder, seq: seq, used: used, spentAt: spentAt,
		want: want, lease: lease})
	return Lease{Granted: r.granted, Seq: r.seq, Holders: r.holders, Remaining: r.remaining,
		LeaseFor: r.lease, Retry: r.retry, Now: r.now, Matched: r.matched}, err
}

// KillForTest stops the store's allowance work without giving anything
// back, as if its process had died, and returns the units it held unspent.
func (s *Store) KillForTest() (held int64) {
	a := s.lent
	a.mu.Lock()
	a.closed = true
	recs := a.recs
	a.recs = map[string]*allowance{}
	a.mu.Unlock()
	close(a.stop)
	<-a.done
	for _, r := range recs {
		r.mu.Lock()
		r.closed = true
		held += r.remaining
		r.mu.Unlock()
	}
	return held
}
