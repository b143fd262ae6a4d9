package redislimit

import (
	"context"
	_ "embed"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/redis/go-redis/v9"
)

// The allowance scripts lend units out of a key's shared state to one
// holder (DESIGN-allowances.md): allowance.lua for the token bucket and
// GCRA, allowance_window.lua for the fixed and sliding windows.

//go:embed allowance.lua
var allowanceSource string

var allowanceScript = redis.NewScript(allowanceSource)

// Allowance script operations.
const (
	lendTake   = 1 // take or renew
	lendReturn = 2
)

// lendRequest is one call of the allowance script by holder on key under
// policy.
type lendRequest struct {
	op      int
	holder  string
	seq     int64 // the lease the holder believes it has; 0 for none
	used    int64 // units spent under seq since the last report
	spentAt int64 // server µs at or after the last of those spends; -1 for now
	want    int64 // units asked for
	lease   time.Duration
	need    int64         // the cost of the decision waiting for the call; 0 for none
	held    int64         // the holder's remainder when sending; -1 for unknown
	grid    time.Duration // the take grid of the key's policy (takeGrid); 0 for none
}

// lendResult is the script's answer.
type lendResult struct {
	granted   int64
	seq       int64 // the holder's lease after the call; 0 for none
	lease     time.Duration
	holders   int64 // live leases and, on a grid, waiting holders on the key, the holder's included
	retry     time.Duration
	remaining int64
	reset     time.Duration
	now       int64 // the server's time of the call, µs
	matched   bool  // the holder's lease seq was live
	// retryUnits is, after a met take on a token bucket or GCRA key, how
	// many units are free beyond what is lent at retry (0: no promise).
	retryUnits int64
}

// lend runs the allowance script of p's algorithm for r on key.
func (s *Store) lend(ctx context.Context, key string, p limit.Policy, r lendRequest) (lendResult, error) {
	u, err := units(p)
	if err != nil {
		return lendResult{}, err
	}
	sc := lendScript(p.Algorithm)
	if sc == nil {
		return lendResult{}, &limit.PolicyError{Policy: p.Name, Field: "algorithm", Reason: "allowances do not hold the rolling window"}
	}
	b := make([]byte, 0, 15*8)
	for _, x := range [...]int64{int64(r.op), u.alg, u.limit, u.n, u.p, u.w, s.now(), r.seq, r.used,
		r.spentAt, r.want, int64(r.lease / time.Microsecond), r.need, r.held, int64(r.grid / time.Microsecond)} {
		b = appendAllowArg(b, x)
	}
	k := s.Key(key, p)
	res, err := s.send(ctx, sc, []string{k}, string(b), r.holder)
	if err != nil {
		return lendResult{}, s.failure(ctx, "lend", []string{k}, err)
	}
	var v [10]int64
	rest, err := parseInts(res, v[:9])
	if err != nil {
		return lendResult{}, err
	}
	if rest != "" { // allowance.lua's retry_units; the windows' script has none
		if _, err := parseInts(rest, v[9:]); err != nil {
			return lendResult{}, err
		}
	}
	return lendResult{granted: v[0], seq: v[1], lease: time.Duration(v[2]) * time.Microsecond, holders: v[3],
		retry: time.Duration(v[4]) * time.Microsecond, remaining: v[5],
		reset: time.Duration(v[6]) * time.Microsecond, now: v[7], matched: v[8] == 1, retryUnits: v[9]}, nil
}

// Bounds of a take grid (takeGrid).
const (
	minGrid     = 200 * time.Millisecond
	maxGrid     = time.Second
	gridRefills = 16 // units refilled between two points, at least
)

// takeGrid returns the take grid of a token bucket or GCRA policy: the
// shortest whole fraction of its period (in whole µs) from minGrid to
// maxGrid over which gridRefills units or more refill, and at most half
// the burst, so that what a point leaves in the bucket is not cut by its
// burst at the next. A take is granted what was free at the last point
// of the grid, and a store refused for want of units is told to come
// back at a point, so that on a key saturated at several stores every
// period of the clock admits the rate, not a share of a take more or less
// (DESIGN-allowances.md, section 2.7). 0, no grid: another algorithm, a
// period under minGrid, too slow a refill or too small a burst for one.
func takeGrid(p limit.Policy) time.Duration {
	if !bucketLike(p) || p.Rate.Count <= 0 || p.Limit <= 0 || p.Rate.Period < minGrid || p.Rate.Period%time.Microsecond != 0 {
		return 0
	}
	per := int64(p.Rate.Period / time.Microsecond)
	lo := int64((p.Rate.Period + maxGrid - 1) / maxGrid) // fewest points a period
	// A point refills Count/k units: at most half the burst.
	lo = max(lo, (2*p.Rate.Count+p.Limit-1)/p.Limit)
	hi := min(int64(p.Rate.Period/minGrid), p.Rate.Count/gridRefills)
	for k := hi; k >= lo && k >= 1; k-- {
		if per%k == 0 {
			return time.Duration(per/k) * time.Microsecond
		}
	}
	return 0
}
