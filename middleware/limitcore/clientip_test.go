package limitcore

import (
	"net/http/httptest"
	"testing"
)

func mustPrefixes(t *testing.T, s ...string) *ClientIP {
	t.Helper()
	p, err := ParsePrefixes(s...)
	if err != nil {
		t.Fatal(err)
	}
	return &ClientIP{TrustedProxies: p}
}

func TestClientIPKey(t *testing.T) {
	trusted := mustPrefixes(t, "10.0.0.0/8", "fd00::/8", "192.0.2.1")
	fwd := *trusted
	fwd.Header = ProxyHeaderForwarded
	for _, tc := range []struct {
		name   string
		c      *ClientIP
		remote string
		hdr    map[string][]string
		want   string
	}{
		{"plain v4", &ClientIP{}, "203.0.113.9:5555", nil, "203.0.113.9"},
		{"v6 masked to /64", &ClientIP{}, "[2001:db8:1:2:3:4:5:6]:80", nil, "2001:db8:1:2::/64"},
		{"v6 whole", &ClientIP{IPv6Prefix: 128}, "[2001:db8::6]:80", nil, "2001:db8::6"},
		{"v6 /48", &ClientIP{IPv6Prefix: 48}, "[2001:db8:1:2::6]:80", nil, "2001:db8:1::/48"},
		{"v4 /24", &ClientIP{IPv4Prefix: 24}, "203.0.113.9:1", nil, "203.0.113.0/24"},
		{"v4-mapped v6", &ClientIP{}, "[::ffff:203.0.113.9]:1", nil, "203.0.113.9"},
		{"zone dropped", &ClientIP{IPv6Prefix: 128}, "[fe80::1%eth0]:1", nil, "fe80::1"},
		{"unix socket", &ClientIP{}, "@", nil, ""},
		{"forged XFF from untrusted peer", trusted, "203.0.113.9:1",
			map[string][]string{"X-Forwarded-For": {"1.1.1.1"}}, "203.0.113.9"},
		{"forged XFF, no proxies configured", &ClientIP{}, "10.0.0.1:1",
			map[string][]string{"X-Forwarded-For": {"1.1.1.1"}}, "10.0.0.1"},
		{"XFF rightmost untrusted", trusted, "10.0.0.1:1",
			map[string][]string{"X-Forwarded-For": {"6.6.6.6, 198.51.100.7, 10.1.1.1"}}, "198.51.100.7"},
		{"XFF over several lines", trusted, "10.0.0.1:1",
			map[string][]string{"X-Forwarded-For": {"6.6.6.6", "198.51.100.7", "10.1.1.1"}}, "198.51.100.7"},
		{"XFF all trusted: leftmost", trusted, "10.0.0.1:1",
			map[string][]string{"X-Forwarded-For": {"10.3.3.3, 10.2.2.2"}}, "10.3.3.3"},
		{"XFF garbage: last trusted hop", trusted, "10.0.0.1:1",
			map[string][]string{"X-Forwarded-For": {"6.6.6.6, nonsense, 10.2.2.2"}}, "10.2.2.2"},
		{"XFF empty: peer", trusted, "10.0.0.1:1", nil, "10.0.0.1"},
		{"XFF v6 client masked", trusted, "[fd00::1]:1",
			map[string][]string{"X-Forwarded-For": {"2001:db8:aa:bb:1::9"}}, "2001:db8:aa:bb::/64"},
		{"Forwarded", trusted, "192.0.2.1:1",
			map[string][]string{"Forwarded": {`for=6.6.6.6, for="[2001:db8:cafe::17]:4711";proto=https, for=10.9.9.9;by=10.0.0.1`}},
			"2001:db8:cafe::/64"},
		{"Forwarded v4 with port, quoted", trusted, "10.0.0.1:1",
			map[string][]string{"Forwarded": {`proto=http;for="198.51.100.7:9000"`}}, "198.51.100.7"},
		{"Forwarded unknown: last trusted", trusted, "10.0.0.1:1",
			map[string][]string{"Forwarded": {`for=unknown, for=10.4.4.4`}}, "10.4.4.4"},
		{"auto prefers Forwarded", trusted, "10.0.0.1:1",
			map[string][]string{"Forwarded": {"for=198.51.100.8"}, "X-Forwarded-For": {"198.51.100.9"}}, "198.51.100.8"},
		{"Forwarded-only ignores XFF", &fwd, "10.0.0.1:1",
			map[string][]string{"X-Forwarded-For": {"198.51.100.9"}}, "10.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.remote
			for k, v := range tc.hdr {
				r.Header[k] = v
			}
			if got := tc.c.Key(r); got != tc.want {
				t.Errorf("Key = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestClientIPValidate(t *testing.T) {
	if err := (&ClientIP{IPv6Prefix: 129}).Validate(); err == nil {
		t.Error("IPv6 prefix 129 accepted")
	}
	if err := (&ClientIP{IPv4Prefix: -1}).Validate(); err == nil {
		t.Error("IPv4 prefix -1 accepted")
	}
	if _, err := ParsePrefixes("10.0.0.0/33"); err == nil {
		t.Error("bad CIDR accepted")
	}
	if _, err := ParsePrefixes("not-an-ip"); err == nil {
		t.Error("bad address accepted")
	}
}

func TestClientIPKeyAllocs(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "203.0.113.9:5555"
	c := &ClientIP{}
	if n := testing.AllocsPerRun(100, func() { _ = c.Key(r) }); n != 0 {
		t.Errorf("Key of an IPv4 peer allocates %v times, want 0", n)
	}
}

func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.1:1", "1.2.3.4, 10.0.0.2", `for="[::1]:80";by=x`)
	f.Add("[fd00::1]:1", "", "for=unknown")
	c := &ClientIP{}
	c.TrustedProxies, _ = ParsePrefixes("10.0.0.0/8", "fd00::/8")
	f.Fuzz(func(t *testing.T, remote, xff, fwd string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		r.Header.Set("X-Forwarded-For", xff)
		r.Header.Set("Forwarded", fwd)
		_ = c.Key(r) // must not panic
	})
}
