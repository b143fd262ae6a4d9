package redislimit

import (
	"context"
	"time"

	"github.com/costwise/batcher/limit"
)

// HeldUnitsForTest returns the units the store's allowances hold unspent.
func (s *Store) HeldUnitsForTest() int64 {
	_, units := s.HeldForTest()
	return units
}

// MakeHotForTest makes key hot under p at once: its next decision at the
// store takes an allowance.
func (s *Store) MakeHotForTest(key string, p limit.Policy) {
	a := s.lent
	rk := s.Key(key, p)
	sh := a.shard(rk)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.recs[rk] != nil {
		return
	}
	now := a.now()
	// As a key found busy: hotThreshold decisions in the last period.
	r := &allowance{sh: sh, rk: rk, key: key, p: p, rateAt: now,
		rate: float64(hotThreshold) / a.period.Seconds()}
	r.lastUse.Store(now.UnixNano())
	r.tgt.Store(a.target(r))
	sh.recs[rk] = r
	sh.publish()
	a.count.Add(1)
	a.start()
}

// LendWindowForTest runs the window allowance script with a decision's
// need and the holder's remainder: op 1, no spend date, the store's clock.
func (s *Store) LendWindowForTest(ctx context.Context, key string, p limit.Policy, holder string,
	seq, used, want, need, held int64, lease time.Duration) (Lease, error) {
	u, err := units(p)
	if err != nil {
		return Lease{}, err
	}
	var args []byte
	for _, x := range [...]int64{lendTake, u.alg, u.limit, u.n, u.p, u.w, s.now(), seq, used, -1, want,
		int64(lease / time.Microsecond), need, held} {
		args = appendAllowArg(args, x)
	}
	res, err := s.send(ctx, allowanceWindowScript, []string{s.Key(key, p)}, string(args), holder)
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

// WaitSettledForTest waits, up to 10s, until no allowance of the store has
// a call in flight or a background renewal due.
func (s *Store) WaitSettledForTest() {
	for deadline := time.Now().Add(10 * time.Second); !s.SettledForTest() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}
