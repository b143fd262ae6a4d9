package redislimit

import (
	"context"
	"fmt"
	"time"

	"github.com/costwise/batcher/limit"
)

// HeldUnitsForTest returns the units the store's allowances hold unspent.
func (s *Store) HeldUnitsForTest() (held int64) {
	a := s.lent
	a.mu.Lock()
	recs := make([]*allowance, 0, len(a.recs))
	for _, r := range a.recs {
		recs = append(recs, r)
	}
	a.mu.Unlock()
	for _, r := range recs {
		r.mu.Lock()
		held += r.remaining
		r.mu.Unlock()
	}
	return held
}

// MakeHotForTest makes key hot under p at once: its next decision at the
// store takes an allowance.
func (s *Store) MakeHotForTest(key string, p limit.Policy) {
	a := s.lent
	rk := s.Key(key, p)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.recs[rk] == nil {
		a.recs[rk] = &allowance{key: key, p: p, lastUse: a.now()}
	}
}

// LendWindowForTest runs the window allowance script with a decision's
// need and the holder's remainder: op 1, no spend date, the store's clock.
func (s *Store) LendWindowForTest(ctx context.Context, key string, p limit.Policy, holder string,
	seq, used, want, need, held int64, lease time.Duration) (Lease, error) {
	u, err := units(p)
	if err != nil {
		return Lease{}, err
	}
	args := fmt.Sprint(lendTake, u.alg, u.limit, u.n, u.p, u.w, s.now(), seq, used, -1, want,
		int64(lease/time.Microsecond), need, held)
	res, err := s.send(ctx, allowanceWindowScript, []string{s.Key(key, p)}, args, holder)
	if err != nil {
		return Lease{}, err
	}
	var v [9]int64
	if _, err := parseInts(res, v[:]); err != nil {
		return Lease{}, err
	}
	return Lease{Granted: v[0], Seq: v[1], LeaseFor: time.Duration(v[2]) * time.Microsecond, Holders: v[3],
		Retry: time.Duration(v[4]) * time.Microsecond, Remaining: v[5], Now: v[7], Matched: v[8] == 1}, nil
}

// WaitSettledForTest returns at once: this store renews only within
// decisions, so nothing is in flight between them.
func (s *Store) WaitSettledForTest() {}
