package limit

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// ParsePolicy parses a policy written as its algorithm followed by
// key=value parameters, separated by spaces or commas:
//
//	token_bucket capacity=10 rate=0.1/s
//	gcra rate=100/s burst=20 name=per-ip
//	fixed_window max=100 window=1m
//
// The keys are name, rate (see ParseRate), window (a Go duration) and the
// limit under the algorithm's own word: capacity (token_bucket), burst
// (gcra), max (the windows), or limit for any. The policy is validated;
// errors are *PolicyError naming the field. String is its inverse.
func ParsePolicy(s string) (Policy, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' || r == '\t' })
	if len(fields) == 0 {
		return Policy{}, &PolicyError{Field: "algorithm", Reason: "missing"}
	}
	a, err := ParseAlgorithm(fields[0])
	if err != nil {
		return Policy{}, err
	}
	p := Policy{Algorithm: a}
	seen := map[string]bool{}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return Policy{}, &PolicyError{Field: k, Reason: "expected key=value"}
		}
		if seen[k] {
			return Policy{}, &PolicyError{Policy: p.Name, Field: k, Reason: "given twice"}
		}
		seen[k] = true
		if err := p.set(k, v); err != nil {
			return Policy{}, err
		}
	}
	if err := p.Validate(); err != nil {
		// Validate names the limit "limit"; the error names it as written,
		// or, when it is missing, by the algorithm's word.
		var pe *PolicyError
		if errors.As(err, &pe) && pe.Field == "limit" && !seen["limit"] {
			pe.Field = limitWord(a)
		}
		return p, err
	}
	return p, nil
}

func (p *Policy) set(k, v string) error {
	bad := func(reason string) error { return &PolicyError{Policy: p.Name, Field: k, Reason: reason} }
	switch k {
	case "name":
		p.Name = v
	case "rate":
		if p.Algorithm != TokenBucketAlgorithm && p.Algorithm != GCRAAlgorithm {
			return bad("not a parameter of " + string(p.Algorithm))
		}
		r, err := ParseRate(v)
		if err != nil {
			return err
		}
		p.Rate = r
	case "window":
		if p.Algorithm == TokenBucketAlgorithm || p.Algorithm == GCRAAlgorithm {
			return bad("not a parameter of " + string(p.Algorithm))
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return bad("not a duration: " + quote(v))
		}
		p.Window = d
	case "limit", "capacity", "burst", "max":
		if k != "limit" && k != limitWord(p.Algorithm) {
			return bad("not a parameter of " + string(p.Algorithm) + "; its limit is " + limitWord(p.Algorithm))
		}
		if p.Limit != 0 {
			return bad("the limit is given twice")
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return bad("not an integer: " + quote(v))
		}
		p.Limit = n
	default:
		return bad("unknown parameter")
	}
	return nil
}

func limitWord(a Algorithm) string {
	switch a {
	case TokenBucketAlgorithm:
		return "capacity"
	case GCRAAlgorithm:
		return "burst"
	}
	return "max"
}

// String returns p in the form ParsePolicy reads.
func (p Policy) String() string {
	var b strings.Builder
	b.WriteString(string(p.Algorithm))
	if p.Name != "" {
		b.WriteString(" name=" + p.Name)
	}
	b.WriteString(" " + limitWord(p.Algorithm) + "=" + strconv.FormatInt(p.Limit, 10))
	if p.Algorithm == TokenBucketAlgorithm || p.Algorithm == GCRAAlgorithm {
		b.WriteString(" rate=" + strconv.FormatInt(p.Rate.Count, 10) + "/" + p.Rate.Period.String())
	} else {
		b.WriteString(" window=" + p.Window.String())
	}
	return b.String()
}
