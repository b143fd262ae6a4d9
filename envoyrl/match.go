package envoyrl

import (
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// Match is the limit a request descriptor is counted against.
type Match struct {
	// Limit is the matched limit; nil when no rule applies.
	Limit *Limit
	// Share holds, per descriptor entry, the wildcard value that replaces
	// the entry's own value in the counter key (share_threshold); nil when
	// no entry shares.
	Share []string
	// Rule is the metrics label: Limit.Rule, or the descriptor's values
	// when the limit asks for detailed metrics.
	Rule string
}

// Match finds the limit of one descriptor of domain, the way
// envoyproxy/ratelimit does: at each level an entry matches its key_value
// first, then a wildcard key_value* (in file order), then its key alone;
// the limit is the one on the level of the descriptor's last entry. A
// descriptor of a known domain that carries its own limit (Envoy's limit
// override) is counted against that. An unknown domain, with an override
// or not, or a descriptor without a rule gives a Match with a nil Limit,
// as in envoyproxy/ratelimit.
func (r *Rules) Match(domain string, d *rlv3.RateLimitDescriptor) Match {
	dom := r.domains[domain]
	if dom == nil {
		return Match{}
	}
	if o := d.GetLimit(); o != nil {
		return overrideMatch(domain, d, o)
	}
	var m Match
	level, prev := dom.children, dom
	entries := d.GetEntries()
	for i, e := range entries {
		finalKey := e.GetKey() + "_" + e.GetValue()
		next := level[finalKey]
		wildcard := ""
		if next == nil {
			for _, wk := range prev.wildcardKeys {
				if strings.HasPrefix(finalKey, strings.TrimSuffix(wk, "*")) {
					next, wildcard = level[wk], wk
					break
				}
			}
		}
		if next == nil {
			next = level[e.GetKey()]
		}
		if wildcard != "" && next != nil && next.shareThreshold && next.wildcardPattern != "" {
			if m.Share == nil {
				m.Share = make([]string, len(entries))
			}
			m.Share[i] = strings.TrimPrefix(next.wildcardPattern, e.GetKey()+"_")
		}
		if next != nil && next.limit != nil && i == len(entries)-1 {
			m.Limit = next.limit
		}
		if next == nil || len(next.children) == 0 {
			break
		}
		level, prev = next.children, next
	}
	if m.Limit == nil {
		return Match{}
	}
	m.Rule = m.Limit.Rule
	if m.Limit.DetailedMetric {
		// As envoyproxy/ratelimit names it: key_value for every entry, an
		// empty value too ("key_"), unless a shared wildcard matched, when
		// that entry shows its pattern and the others drop an empty value.
		m.Rule = detailedRule(domain, entries, m.Share, len(m.Share) == 0)
	}
	return m
}

// detailedRule is the rule label with the descriptor's values, shared
// wildcard values kept as their pattern; an empty value is written as
// key_ when keepEmpty is set, as key otherwise.
func detailedRule(domain string, entries []*rlv3.RateLimitDescriptor_Entry, share []string, keepEmpty bool) string {
	var b strings.Builder
	b.WriteString(domain)
	for i, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.GetKey())
		v := e.GetValue()
		if i < len(share) && share[i] != "" {
			v = share[i]
		}
		if v != "" || keepEmpty {
			b.WriteByte('_')
			b.WriteString(v)
		}
	}
	return b.String()
}

// overrideMatch is the limit a descriptor brings with it.
func overrideMatch(domain string, d *rlv3.RateLimitDescriptor, o *rlv3.RateLimitDescriptor_RateLimitOverride) Match {
	unit := rlsv3.RateLimitResponse_RateLimit_Unit(o.GetUnit())
	rule := detailedRule(domain, d.GetEntries(), nil, false)
	l := &Limit{
		Proto:   &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: unit},
		Rule:    rule,
		Domain:  domain,
		divider: UnitSeconds(unit),
	}
	return Match{Limit: l, Rule: rule}
}
