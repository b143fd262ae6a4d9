package limit

import (
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// ParseAlgorithm returns the algorithm named s ("token_bucket", "gcra",
// "fixed_window", "rolling_window", "sliding_window"), or a *PolicyError.
func ParseAlgorithm(s string) (Algorithm, error) {
	for _, a := range Algorithms {
		if string(a) == s {
			return a, nil
		}
	}
	return "", &PolicyError{Field: "algorithm", Reason: "unknown algorithm " + quote(s)}
}

// rateUnits are the unit names ParseRate accepts after the slash.
var rateUnits = map[string]time.Duration{
	"us": time.Microsecond, "ms": time.Millisecond,
	"s": time.Second, "sec": time.Second, "second": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute,
	"h": time.Hour, "hour": time.Hour, "d": 24 * time.Hour, "day": 24 * time.Hour,
}

// ParseRate parses a rate: a decimal count, a slash and a period, either a
// unit (us, ms, s, sec, second, m, min, minute, h, hour, d, day) or a Go
// duration ("100/s", "0.1/s", "5/min", "20/1m30s"). A count alone is per
// second ("0.1"). The result is exact: "0.1/s" is 1 per 10 s. Errors are
// *PolicyError with Field "rate".
func ParseRate(s string) (Rate, error) {
	bad := func(reason string) (Rate, error) {
		return Rate{}, &PolicyError{Field: "rate", Reason: quote(s) + ": " + reason}
	}
	count, per, found := strings.Cut(strings.TrimSpace(s), "/")
	period := time.Second
	if found {
		per = strings.TrimSpace(per)
		if u, ok := rateUnits[per]; ok {
			period = u
		} else if d, err := time.ParseDuration(per); err == nil && d > 0 {
			period = d
		} else {
			return bad("the period is not a unit or a positive duration")
		}
	}
	num, den, ok := parseDecimal(strings.TrimSpace(count))
	if !ok {
		return bad("the count is not a positive decimal number")
	}
	if den > 1 && int64(period) > math.MaxInt64/den {
		return bad("too many decimals for the period")
	}
	return Rate{Count: num, Period: period * time.Duration(den)}, nil
}

// parseDecimal parses a positive decimal "12.5" as 125/10, with at most 9
// decimals.
func parseDecimal(s string) (num, den int64, ok bool) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" || len(frac) > 9 || strings.ContainsAny(whole+frac, "+-_") {
		return 0, 0, false
	}
	den = 1
	for range frac {
		den *= 10
	}
	n, err := strconv.ParseInt(whole+frac, 10, 64)
	if err != nil || n <= 0 {
		return 0, 0, false
	}
	g := gcd(n, den)
	return n / g, den / g, true
}

// RateFromFloat returns the rate of perSecond tokens per second, as the
// configuration files of the reference service give it ("rate: 0.1"): the
// closest fraction with a period of at most 10^6 seconds, exact for decimals
// of up to 6 places (0.1 is 1 per 10 s, 1/3.0 is 1 per 3 s).
func RateFromFloat(perSecond float64) (Rate, error) {
	if math.IsNaN(perSecond) || math.IsInf(perSecond, 0) || perSecond <= 0 || perSecond > 1e12 {
		return Rate{}, &PolicyError{Field: "rate", Reason: "must be a positive finite number up to 1e12"}
	}
	r := new(big.Rat).SetFloat64(perSecond)
	num, den := bestFraction(r, 1_000_000)
	if num == 0 {
		return Rate{}, &PolicyError{Field: "rate", Reason: "below one per 10^6 seconds"}
	}
	return Rate{Count: num, Period: time.Duration(den) * time.Second}, nil
}

// CostFromFloat returns a fractional cost of tokens in the units of a
// policy scaled by scale (see Policy.Scale): tokens × scale, rounded up to
// a whole unit. A unit is the store's resolution, and a positive cost is
// never rounded down to nothing: 1e-9 tokens at scale 1000 costs one unit,
// a thousandth of a token, as 0.0011 costs two. The product is first rounded
// to a millionth of a unit, so that a decimal such as 0.1 at scale 1000 is
// 100 units, not 101 by the error of its binary form (below 2^32 units;
// above, a double's own precision is coarser than that). A cost that is
// negative, NaN, infinite, or above 2^50 units is refused with a *CostError.
func CostFromFloat(tokens float64, scale int64) (int64, error) {
	if scale <= 0 {
		return 0, &PolicyError{Field: "scale", Reason: "must be positive"}
	}
	units := tokens * float64(scale)
	if math.IsNaN(units) || tokens < 0 || units > maxUnits {
		return 0, &CostError{Tokens: tokens}
	}
	if tokens == 0 {
		return 0, nil
	}
	if units < 1<<32 { // where a millionth of a unit is well within a double's precision
		units = math.Round(units*1e6) / 1e6
	}
	return max(int64(math.Ceil(units)), 1), nil
}

// bestFraction returns the closest fraction to r with a denominator of at
// most maxDen, by continued fractions.
func bestFraction(r *big.Rat, maxDen int64) (int64, int64) {
	if r.Denom().IsInt64() && r.Denom().Int64() <= maxDen && r.Num().IsInt64() {
		return r.Num().Int64(), r.Denom().Int64()
	}
	// Convergents h/k of the continued fraction of r.
	h0, h1, k0, k1 := int64(0), int64(1), int64(1), int64(0)
	x := new(big.Rat).Set(r)
	for range 64 {
		a := new(big.Int).Quo(x.Num(), x.Denom())
		if !a.IsInt64() {
			break
		}
		ai := a.Int64()
		if k1 != 0 && ai > (maxDen-k0)/k1 {
			break
		}
		h0, h1 = h1, ai*h1+h0
		k0, k1 = k1, ai*k1+k0
		frac := new(big.Rat).Sub(x, new(big.Rat).SetInt(a))
		if frac.Sign() == 0 {
			break
		}
		x.Inv(frac)
	}
	if k1 == 0 {
		return 0, 1
	}
	return h1, k1
}
