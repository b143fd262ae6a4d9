package envoyrl

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

func TestParseRefuses(t *testing.T) {
	cases := []struct {
		name, yaml, reason string
	}{
		{"bad yaml", "domain: [a\n", "error loading config file"},
		{"empty domain", "descriptors: []\n", "config file cannot have empty domain"},
		{"unknown key", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requestsperunit: 5}\n", "unknown key 'requestsperunit'"},
		{"non-string key", "0.25: d\n", "key is not of type string"},
		{"list of scalars", "domain: d\ndescriptors: [a, b]\n", "list of type other than map"},
		{"float leaf", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1.5}\n", "error checking config"},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n", "descriptor has empty key"},
		{"duplicate key", "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n", "duplicate descriptor composite key 'd.k_v'"},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n", "invalid rate limit unit 'fortnight'"},
		{"no unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 5}\n", "invalid rate limit unit ''"},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, unlimited: true}\n", "should not specify rate limit unit when unlimited"},
		{"empty replaces", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1, replaces: [{name: ''}]}\n", "empty replaces entry"},
		{"replaces self", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1, name: a, replaces: [{name: a}]}\n", "replaces should not contain name of same descriptor"},
		{"share without wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n", "share_threshold can only be used with wildcard values"},
		{"negative rate", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: -1}\n", "error loading config file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]File{{Name: "rules/x.yaml", Content: []byte(c.yaml)}})
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Parse = %v, want a *ConfigError", err)
			}
			if ce.File != "rules/x.yaml" || !strings.Contains(ce.Reason, c.reason) {
				t.Fatalf("error %q: want file rules/x.yaml and a reason containing %q", err, c.reason)
			}
		})
	}
}

func TestParseDuplicateDomainAcrossFiles(t *testing.T) {
	f := []byte("domain: d\n")
	_, err := Parse([]File{{"a.yaml", f}, {"b.yaml", f}})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.File != "b.yaml" || !strings.Contains(ce.Reason, "duplicate domain 'd'") {
		t.Fatalf("Parse = %v, want duplicate domain in b.yaml", err)
	}
}

func TestParseUnits(t *testing.T) {
	want := map[string]int64{"second": 1, "MINUTE": 60, "Hour": 3600, "day": 86400, "week": 604800, "month": 2592000, "year": 31536000}
	for name, secs := range want {
		u, ok := ParseUnit(name)
		if !ok || UnitSeconds(u) != secs {
			t.Errorf("unit %q: %v %v, %d s; want %d s", name, u, ok, UnitSeconds(u), secs)
		}
	}
	if _, ok := ParseUnit("unknown"); ok {
		t.Errorf("ParseUnit(unknown) accepted")
	}
}

func TestReadDirSkipsOtherFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: a\n")
	write("b.yml", "domain: b\n")
	write(".hidden.yaml", "not: valid: yaml")
	write("notes.txt", "anything")
	r, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.Domains(), ","); got != "a,b" {
		t.Fatalf("domains %q, want a,b", got)
	}
}

const matchRules = `
domain: test
descriptors:
  - key: key1
    value: value1
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: key1
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: wild
    value: foo*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: midWild
    value: bar*b
    rate_limit: {unit: minute, requests_per_unit: 21}
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: file
    value: test1
    rate_limit: {unit: minute, requests_per_unit: 50}
  - key: file
    value: test*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 101}
  - key: parent
    value: p
    rate_limit: {unit: day, requests_per_unit: 7}
    descriptors:
      - key: child
        rate_limit: {unit: day, requests_per_unit: 8}
      - key: nolimit
  - key: free
    rate_limit: {unlimited: true}
`

func mustRules(t testing.TB, body string) *Rules {
	t.Helper()
	r, err := Parse([]File{{Name: "test.yaml", Content: []byte(body)}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func TestMatch(t *testing.T) {
	r := mustRules(t, matchRules)
	cases := []struct {
		name   string
		domain string
		d      *rlv3.RateLimitDescriptor
		rpu    uint32 // 0: no limit
		share  string // share pattern of the last entry
	}{
		{"key and value first", "test", desc("key1", "value1"), 5, ""},
		{"key alone for other values", "test", desc("key1", "other"), 10, ""},
		{"wildcard prefix", "test", desc("wild", "foobar"), 20, ""},
		{"wildcard exact prefix", "test", desc("wild", "foo"), 20, ""},
		{"wildcard miss", "test", desc("wild", "fo"), 0, ""},
		{"star inside is literal", "test", desc("midWild", "barXb"), 0, ""},
		{"star inside literal match", "test", desc("midWild", "bar*b"), 21, ""},
		{"shared wildcard", "test", desc("files", "files/a.txt"), 100, "files/*"},
		{"explicit beats wildcard", "test", desc("file", "test1"), 50, ""},
		{"shared wildcard other value", "test", desc("file", "test2"), 101, "test*"},
		{"parent level", "test", desc("parent", "p"), 7, ""},
		{"nested key", "test", desc("parent", "p", "child", "x"), 8, ""},
		{"nested without limit", "test", desc("parent", "p", "nolimit", "x"), 0, ""},
		{"deeper than rules", "test", desc("key1", "value1", "extra", "x"), 0, ""},
		{"unknown key", "test", desc("nope", "x"), 0, ""},
		{"unknown domain", "other", desc("key1", "value1"), 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := r.Match(c.domain, c.d)
			var got uint32
			if m.Limit != nil {
				got = m.Limit.Proto.RequestsPerUnit
			}
			if got != c.rpu {
				t.Fatalf("limit %d, want %d", got, c.rpu)
			}
			share := ""
			if len(m.Share) > 0 {
				share = m.Share[len(m.Share)-1]
			}
			if share != c.share {
				t.Fatalf("share %q, want %q", share, c.share)
			}
		})
	}
	if m := r.Match("test", desc("free", "x")); m.Limit == nil || !m.Limit.Unlimited {
		t.Fatalf("unlimited descriptor: %+v", m)
	}
}

func TestMatchOverride(t *testing.T) {
	r := mustRules(t, matchRules)
	d := desc("key1", "value1")
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 42, Unit: typev3.RateLimitUnit_HOUR}
	m := r.Match("test", d)
	if m.Limit == nil || m.Limit.Proto.RequestsPerUnit != 42 || m.Limit.divider != 3600 {
		t.Fatalf("override: %+v", m.Limit)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(matchRules))
	f.Add([]byte("domain: d\ndescriptors: [{key: a, descriptors: [{key: b, value: c*, share_threshold: true}]}]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse([]File{{Name: "f.yaml", Content: b}})
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is not a *ConfigError", err)
			}
			return
		}
		for _, d := range r.Domains() {
			r.Match(d, desc("a", "b", "c", "d"))
		}
	})
}

// An override on a domain the rules do not name limits nothing, as in
// envoyproxy/ratelimit, which looks the domain up first.
func TestMatchOverrideOnUnknownDomain(t *testing.T) {
	r := mustRules(t, matchRules)
	d := desc("key1", "value1")
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_MINUTE}
	if m := r.Match("no-such-domain", d); m.Limit != nil {
		t.Fatalf("override on an unknown domain: %+v, want no limit", m.Limit)
	}
}

// detailed_metric names the rule after the descriptor's values the way
// envoyproxy/ratelimit names its stats: key_value for every entry, key_
// for an empty value; a limit override keeps the key alone.
func TestDetailedMetricRule(t *testing.T) {
	r := mustRules(t, "domain: d\ndescriptors:\n  - key: det\n    detailed_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"+
		"  - key: org\n    descriptors:\n      - key: team\n        detailed_metric: true\n        rate_limit: {unit: minute, requests_per_unit: 5}\n")
	for _, c := range []struct {
		d    *rlv3.RateLimitDescriptor
		want string
	}{
		{desc("det", "x"), "d.det_x"},
		{desc("det", ""), "d.det_"},
		{desc("org", "", "team", "a"), "d.org_.team_a"},
	} {
		if m := r.Match("d", c.d); m.Rule != c.want {
			t.Errorf("%v: rule %q, want %q", c.d, m.Rule, c.want)
		}
	}
	o := desc("det", "")
	o.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_MINUTE}
	if m := r.Match("d", o); m.Rule != "d.det" {
		t.Errorf("override: rule %q, want d.det", m.Rule)
	}
}
