package limitcore

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// ProxyHeader chooses which header a trusted proxy reports the client in.
type ProxyHeader int

const (
	// ProxyHeaderAuto reads Forwarded (RFC 7239) when the request has one,
	// and X-Forwarded-For otherwise. Prefer naming the one header your
	// proxies set: with Auto, a client can send the header your proxy does
	// not touch, and only the trusted-proxy check limits what it can claim.
	ProxyHeaderAuto ProxyHeader = iota
	// ProxyHeaderXFF reads only X-Forwarded-For.
	ProxyHeaderXFF
	// ProxyHeaderForwarded reads only Forwarded (RFC 7239).
	ProxyHeaderForwarded
)

// DefaultIPv6Prefix is the prefix length IPv6 clients are grouped by: a /64
// is the smallest block a host is usually given, and within it a host can
// pick a new address for every request.
const DefaultIPv6Prefix = 64

// ClientIP finds the address of the client that sent a request. The zero
// value trusts no proxy: the client is the connection's peer (RemoteAddr),
// whatever the request's headers say. httplimit's Options.ClientIP and
// KeyIP use all of it; grpclimit's KeyPeer only its prefix lengths. A
// ClientIP must not be changed after its first use; it is then safe for
// concurrent use.
type ClientIP struct {
	// TrustedProxies lists the networks of the proxies in front of the
	// service. Only a request whose peer is in one of them has its
	// X-Forwarded-For or Forwarded header read; the client is then the
	// rightmost address in it that is not a trusted proxy, since every
	// address left of that one was written by the client itself, which can
	// forge anything.
	TrustedProxies []netip.Prefix
	// Header chooses the header read from trusted proxies; the default is
	// ProxyHeaderAuto.
	Header ProxyHeader
	// IPv6Prefix is the prefix length IPv6 addresses are masked to; zero
	// means DefaultIPv6Prefix, and 128 keeps whole addresses.
	IPv6Prefix int
	// IPv4Prefix is the prefix length IPv4 addresses are masked to; zero
	// means 32 (whole addresses).
	IPv4Prefix int
}

// InvalidPrefixError reports a prefix length out of range for its family.
type InvalidPrefixError struct {
	Family string // "IPv4" or "IPv6"
	Bits   int
}

// Error names the family and the length.
func (e *InvalidPrefixError) Error() string {
	return fmt.Sprintf("limitcore: invalid %s prefix length %d", e.Family, e.Bits)
}

// Validate checks the prefix lengths and the trusted networks.
func (c *ClientIP) Validate() error {
	if c.IPv4Prefix < 0 || c.IPv4Prefix > 32 {
		return &InvalidPrefixError{Family: "IPv4", Bits: c.IPv4Prefix}
	}
	if c.IPv6Prefix < 0 || c.IPv6Prefix > 128 {
		return &InvalidPrefixError{Family: "IPv6", Bits: c.IPv6Prefix}
	}
	for _, p := range c.TrustedProxies {
		if !p.IsValid() {
			return fmt.Errorf("limitcore: invalid trusted proxy network %v", p)
		}
	}
	return nil
}

// ParsePrefixes parses CIDRs ("10.0.0.0/8", "fd00::/8") and single addresses
// (taken as /32 or /128) for ClientIP.TrustedProxies.
func ParsePrefixes(cidrs ...string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, s := range cidrs {
		s = strings.TrimSpace(s)
		if !strings.Contains(s, "/") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("limitcore: trusted proxy %q: %w", s, err)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("limitcore: trusted proxy %q: %w", s, err)
		}
		out = append(out, netip.PrefixFrom(p.Addr().Unmap(), p.Bits()).Masked())
	}
	return out, nil
}

// Addr returns the client's address, unmasked, and whether one was found.
// It finds none only when RemoteAddr is not an IP address (a Unix socket,
// for example).
func (c *ClientIP) Addr(r *http.Request) (netip.Addr, bool) {
	a, _, ok := c.addr(r)
	return a, ok
}

// Key returns the client's address masked to the configured prefix, as a
// limit key: "192.0.2.7" for a whole IPv4 address, "2001:db8:1:2::/64" for
// an IPv6 block. It returns "" when no address is found. For an IPv4 peer
// kept whole it allocates nothing.
func (c *ClientIP) Key(r *http.Request) string {
	a, text, ok := c.addr(r)
	if !ok {
		return ""
	}
	if a.Is4() && (c.IPv4Prefix == 0 || c.IPv4Prefix == 32) {
		return text // canonical already: ParseAddr rejects other IPv4 forms
	}
	return c.AddrKey(a)
}

// AddrKey returns a as a limit key, masked as Key masks client addresses:
// for callers that know the address already, such as a gRPC peer.
func (c *ClientIP) AddrKey(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	if a.Is4() {
		if c.IPv4Prefix == 0 || c.IPv4Prefix == 32 {
			return a.String()
		}
		return netip.PrefixFrom(a, c.IPv4Prefix).Masked().String()
	}
	bits := c.IPv6Prefix
	if bits == 0 {
		bits = DefaultIPv6Prefix
	}
	if bits == 128 {
		return a.String()
	}
	return netip.PrefixFrom(a, bits).Masked().String()
}

// addr returns the client's address, unmapped and without zone, with its
// text when that is a canonical IPv4 address (so the key needs no
// formatting).
func (c *ClientIP) addr(r *http.Request) (netip.Addr, string, bool) {
	peer, text, ok := splitHostAddr(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, "", false
	}
	if len(c.TrustedProxies) == 0 || !c.trusted(peer) {
		return peer, text, true
	}
	if a, t, ok := c.fromHeaders(r); ok {
		return a, t, true
	}
	return peer, text, true
}

// splitHostAddr parses "host:port" or a bare host as an address.
func splitHostAddr(s string) (netip.Addr, string, bool) {
	host := s
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return normal(ap.Addr(), hostPart(s))
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, "", false
	}
	return normal(a, host)
}

// hostPart returns the host of a "host:port" string netip accepted.
func hostPart(s string) string {
	return s[:strings.LastIndexByte(s, ':')]
}

// normal unmaps and unzones a, keeping text only for plain IPv4 (text then
// is canonical, as netip accepts no other IPv4 spelling).
func normal(a netip.Addr, text string) (netip.Addr, string, bool) {
	if a.Is4() {
		return a, text, true
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return a, a.String(), true
	}
	return a, "", true
}

func (c *ClientIP) trusted(a netip.Addr) bool {
	for _, p := range c.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// fromHeaders walks the proxy header's addresses from right to left and
// returns the first that is not a trusted proxy. When every address is
// trusted it returns the leftmost; when an entry is not an address
// ("unknown", an obfuscated name, garbage) it returns the trusted hop to
// its right, the last one known, or reports none found.
func (c *ClientIP) fromHeaders(r *http.Request) (netip.Addr, string, bool) {
	var values []string
	useForwarded := false
	switch c.Header {
	case ProxyHeaderForwarded:
		values, useForwarded = r.Header.Values("Forwarded"), true
	case ProxyHeaderXFF:
		values = r.Header.Values("X-Forwarded-For")
	default:
		if values = r.Header.Values("Forwarded"); len(values) > 0 {
			useForwarded = true
		} else {
			values = r.Header.Values("X-Forwarded-For")
		}
	}
	var last netip.Addr
	var lastText string
	found := false
	for i := len(values) - 1; i >= 0; i-- {
		v := values[i]
		for v != "" {
			var elem string
			v, elem = cutLastElement(v)
			host := strings.TrimSpace(elem)
			if useForwarded {
				host = forwardedFor(host)
			}
			a, text, ok := splitHostAddr(host)
			if !ok {
				return last, lastText, found
			}
			if !c.trusted(a) {
				return a, text, true
			}
			last, lastText, found = a, text, true
		}
	}
	return last, lastText, found
}

// cutLastElement splits a comma-separated list at its last comma that is
// not inside a quoted string, returning the rest and the last element.
func cutLastElement(v string) (rest, elem string) {
	inQuote := false
	for i := len(v) - 1; i >= 0; i-- {
		switch v[i] {
		case '"':
			if i == 0 || v[i-1] != '\\' {
				inQuote = !inQuote
			}
		case ',':
			if !inQuote {
				return v[:i], v[i+1:]
			}
		}
	}
	return "", v
}

// forwardedFor returns the node of the for= parameter of one Forwarded
// element ("for=192.0.2.60;proto=http"), unquoted, or "" when it has none.
func forwardedFor(elem string) string {
	for elem != "" {
		var pair string
		pair, elem, _ = strings.Cut(elem, ";")
		name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(name), "for") {
			continue
		}
		value = strings.TrimSpace(value)
		if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
			value = strings.ReplaceAll(value[1:len(value)-1], `\`, "")
		}
		return value
	}
	return ""
}
