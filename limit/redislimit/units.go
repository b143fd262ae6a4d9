package redislimit

import (
	"time"

	"github.com/costwise/batcher/limit"
)

// policyUnits are the integers the script computes with: the algorithm's
// number, the limit, the rate reduced to lowest terms (period in µs) and the
// window in µs. They are those of package limit's memory store.
type policyUnits struct{ alg, limit, n, p, w int64 }

var algNumbers = map[limit.Algorithm]int64{
	limit.TokenBucketAlgorithm: 1, limit.GCRAAlgorithm: 2, limit.FixedWindowAlgorithm: 3,
	limit.RollingWindowAlgorithm: 4, limit.SlidingWindowAlgorithm: 5,
}

func units(p limit.Policy) (policyUnits, error) {
	if err := p.Validate(); err != nil {
		return policyUnits{}, err
	}
	u := policyUnits{alg: algNumbers[p.Algorithm], limit: p.Limit, n: 1, p: 1, w: 1}
	switch p.Algorithm {
	case limit.TokenBucketAlgorithm, limit.GCRAAlgorithm:
		per := int64(p.Rate.Period / time.Microsecond)
		g := gcd(p.Rate.Count, per)
		u.n, u.p = p.Rate.Count/g, per/g
	default:
		u.w = int64(p.Window / time.Microsecond)
	}
	return u, nil
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
