package grpclimit

import (
	"context"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/costwise/batcher/middleware/limitcore"
)

// KeyFunc returns the key a call spends under in one policy, from the
// call's context (metadata, peer, values an authentication interceptor
// left) and its full method name ("/pkg.Service/Method"). An empty key
// means the policy does not apply to the call. A KeyFunc must be safe for
// concurrent use.
type KeyFunc func(ctx context.Context, fullMethod string) string

// KeyMetadata returns a KeyFunc that keys by the first value of the
// incoming metadata entry name (an API key, a tenant), cut at 512 bytes; a
// call without it gets "".
func KeyMetadata(name string) KeyFunc {
	name = strings.ToLower(name)
	return func(ctx context.Context, _ string) string {
		md, _ := metadata.FromIncomingContext(ctx)
		v := md[name]
		if len(v) == 0 {
			return ""
		}
		return limitcore.TruncateKey(v[0])
	}
}

// KeyPeer returns a KeyFunc that keys by the address of the connection's
// peer, masked as c masks addresses (its IPv4Prefix and IPv6Prefix; IPv6 to
// /64 by default; its proxy settings do not apply to gRPC); nil c means the
// zero ClientIP. A peer that is not an IP address (a Unix socket) gets its
// network address string.
func KeyPeer(c *limitcore.ClientIP) KeyFunc {
	if c == nil {
		c = &limitcore.ClientIP{}
	}
	return func(ctx context.Context, _ string) string {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return ""
		}
		if tcp, ok := p.Addr.(*net.TCPAddr); ok {
			if a, ok := netip.AddrFromSlice(tcp.IP); ok {
				return c.AddrKey(a)
			}
		}
		if ap, err := netip.ParseAddrPort(p.Addr.String()); err == nil {
			return c.AddrKey(ap.Addr())
		}
		return p.Addr.String()
	}
}

// KeyContext returns a KeyFunc that keys by the value ctxKey holds in the
// call's context: strings as they are, fmt.Stringer values and integers
// formatted; anything else, or nothing, gives "".
func KeyContext(ctxKey any) KeyFunc {
	return func(ctx context.Context, _ string) string {
		return limitcore.ContextKey(ctx.Value(ctxKey))
	}
}

// KeyMethod keys by the full method name: one budget per method.
func KeyMethod(_ context.Context, fullMethod string) string { return fullMethod }

// KeyConst returns a KeyFunc that gives every call the key k: a global
// policy.
func KeyConst(k string) KeyFunc {
	return func(context.Context, string) string { return k }
}

// KeyJoin returns a KeyFunc whose key is the keys of fns joined by '|'; if
// any part is empty the key is empty.
func KeyJoin(fns ...KeyFunc) KeyFunc {
	return func(ctx context.Context, m string) string {
		var b strings.Builder
		for i, fn := range fns {
			k := fn(ctx, m)
			if k == "" {
				return ""
			}
			if i > 0 {
				b.WriteByte(limitcore.KeySeparator)
			}
			b.WriteString(k)
		}
		return b.String()
	}
}

// CostFunc returns what a call spends in every policy: non-negative, 0 to
// only look. For a streaming call it is charged once, when the stream
// opens. It must be safe for concurrent use.
type CostFunc func(ctx context.Context, fullMethod string) int64

// CostTable returns a CostFunc that looks the full method name up in table
// ("/pkg.Service/Method"), then the service ("/pkg.Service/"), and costs
// def for anything else. The table is copied.
func CostTable(table map[string]int64, def int64) CostFunc {
	t := make(map[string]int64, len(table))
	for k, v := range table {
		t[k] = v
	}
	return func(_ context.Context, m string) int64 {
		if c, ok := t[m]; ok {
			return c
		}
		if i := strings.LastIndexByte(m, '/'); i > 0 {
			if c, ok := t[m[:i+1]]; ok {
				return c
			}
		}
		return def
	}
}
