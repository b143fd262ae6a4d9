package limit

import (
	"math/bits"
	"strings"
	"time"
)

// alg is the algorithm as a small integer, for switches on the hot path.
type alg uint8

const (
	algTokenBucket alg = iota + 1
	algGCRA
	algFixed
	algRolling
	algSliding
)

// maxSlidingLimit bounds the sliding window's limit, so that its two counts
// (each at most twice the limit) share one int64 in the memory store.
const maxSlidingLimit = 1 << 30

// maxRollingLimit bounds the entries of a rolling window's log.
const maxRollingLimit = 1 << 20

// params are a validated policy in the units of the arithmetic: time in
// microseconds, the rate reduced to lowest terms.
type params struct {
	alg   alg
	limit int64
	n     int64 // token bucket, GCRA: tokens per period p, reduced
	p     int64 // token bucket, GCRA: period in µs, reduced; a token weighs p units
	cap   int64 // token bucket, GCRA: limit * p units
	// gcraLim caps how far (µs) a GCRA's TAT counts ahead of now:
	// 2*cap/n + 1.
	gcraLim int64
	invP    float64 // token bucket, GCRA: 1/p
	w       int64   // windows: window in µs
}

func (p Policy) params() (params, error) {
	pe := func(field, reason string) (params, error) {
		return params{}, &PolicyError{Policy: p.Name, Field: field, Reason: reason}
	}
	var pr params
	switch p.Algorithm {
	case TokenBucketAlgorithm:
		pr.alg = algTokenBucket
	case GCRAAlgorithm:
		pr.alg = algGCRA
	case FixedWindowAlgorithm:
		pr.alg = algFixed
	case RollingWindowAlgorithm:
		pr.alg = algRolling
	case SlidingWindowAlgorithm:
		pr.alg = algSliding
	case "":
		return pe("algorithm", "missing")
	default:
		return pe("algorithm", "unknown algorithm "+quote(string(p.Algorithm)))
	}
	if reason := checkName(p.Name); reason != "" {
		return pe("name", reason)
	}
	if p.Limit <= 0 {
		return pe("limit", "must be positive")
	}
	pr.limit = p.Limit
	if pr.alg == algTokenBucket || pr.alg == algGCRA {
		return pr.rate(p, pe)
	}
	if p.Window <= 0 {
		return pe("window", "must be positive")
	}
	if p.Window%time.Microsecond != 0 {
		return pe("window", "must be a whole number of microseconds")
	}
	pr.w = p.Window.Microseconds()
	if hi, lo := bits.Mul64(uint64(pr.limit), uint64(pr.w)); hi != 0 || lo > maxUnits/4 {
		return pe("limit", "limit times window is too large")
	}
	if pr.alg == algSliding && pr.limit > maxSlidingLimit {
		return pe("limit", "a sliding window counts in 31 bits: at most 1073741824")
	}
	if pr.alg == algRolling && pr.limit > maxRollingLimit {
		return pe("limit", "a rolling window keeps an entry per admitted cost: at most 1048576")
	}
	return pr, nil
}

func (pr params) rate(p Policy, pe func(string, string) (params, error)) (params, error) {
	if p.Rate.Count <= 0 {
		return pe("rate", "count must be positive")
	}
	if p.Rate.Period <= 0 {
		return pe("rate", "period must be positive")
	}
	if p.Rate.Period%time.Microsecond != 0 {
		return pe("rate", "period must be a whole number of microseconds")
	}
	per := p.Rate.Period.Microseconds()
	g := gcd(p.Rate.Count, per)
	pr.n, pr.p = p.Rate.Count/g, per/g
	hi, lo := bits.Mul64(uint64(pr.limit), uint64(pr.p))
	if hi != 0 || lo > maxUnits/2 || pr.n > maxUnits/2 {
		return pe("rate", "limit times period per token is too large")
	}
	pr.cap = int64(lo)
	pr.gcraLim = 2*pr.cap/pr.n + 1
	pr.invP = 1 / float64(pr.p)
	return pr, nil
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

func quote(s string) string {
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return "\"" + s + "\""
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// unixMicro returns t in microseconds since the Unix epoch.
func unixMicro(t time.Time) int64 { return t.UnixMicro() }

// checkName returns what is wrong with a policy name, or "". Names go into
// store keys, response headers and ParsePolicy's text, so they are printable
// ASCII without the characters those give a meaning.
func checkName(name string) string {
	if len(name) > 128 {
		return "longer than 128 bytes"
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c > '~' || strings.IndexByte(",={}\\\"", c) >= 0 {
			return "may hold printable ASCII except space and , = { } \\ \""
		}
	}
	return ""
}
