package httplimit

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/costwise/batcher/middleware/limitcore"
)

// KeyFunc returns the key a request spends under in one policy: the client
// IP, an API key, a user, a tenant, a route, or any mix of them. An empty
// key means the policy does not apply to the request (a per-API-key policy
// for a request that carries no key, say), which is how one middleware can
// limit authenticated and anonymous callers differently. A KeyFunc must be
// safe for concurrent use.
type KeyFunc func(r *http.Request) string

// KeyIP returns a KeyFunc that keys by client address as c finds it; a nil
// c means the zero ClientIP (RemoteAddr, no proxy trusted, IPv6 masked to
// /64). A request whose RemoteAddr is not an IP address gets the key "".
func KeyIP(c *ClientIP) KeyFunc {
	if c == nil {
		c = &ClientIP{}
	}
	return c.Key
}

// KeyHeader returns a KeyFunc that keys by the value of the request header
// name (an API key, for example); a request without it gets the key "".
// Values longer than 512 bytes are cut there, so a client cannot make the
// store hold arbitrarily long keys.
func KeyHeader(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) string {
		v := r.Header[name]
		if len(v) == 0 {
			return ""
		}
		return limitcore.TruncateKey(v[0])
	}
}

// KeyContext returns a KeyFunc that keys by the value that ctxKey holds in
// the request's context, as an authentication middleware earlier in the
// chain leaves it (a user or tenant id). Strings are used as they are;
// fmt.Stringer values and integers are formatted; a missing value, or one
// of another type, gives "".
func KeyContext(ctxKey any) KeyFunc {
	return func(r *http.Request) string {
		return limitcore.ContextKey(r.Context().Value(ctxKey))
	}
}

// KeyRoute keys by route: the pattern net/http's ServeMux matched
// (Request.Pattern, such as "GET /items/{id}") when the middleware runs
// inside the mux's handler, and the method and path otherwise. A router
// that records its route elsewhere (chi's RouteContext) is served by a
// custom KeyFunc.
func KeyRoute(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	return r.Method + " " + limitcore.TruncateKey(r.URL.Path)
}

// KeyConst returns a KeyFunc that gives every request the key k: a global
// policy shared by all callers.
func KeyConst(k string) KeyFunc {
	return func(*http.Request) string { return k }
}

// KeyJoin returns a KeyFunc whose key is the keys of fns joined by '|'
// ("tenant|route"): one budget per combination. If any part is empty the
// joined key is empty, so the policy applies only to requests that have all
// its parts.
func KeyJoin(fns ...KeyFunc) KeyFunc {
	return func(r *http.Request) string {
		var b strings.Builder
		for i, fn := range fns {
			k := fn(r)
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

// CostFunc returns the cost a request spends in every policy: a
// non-negative integer, 0 to only look. A CostFunc must be safe for
// concurrent use.
type CostFunc func(r *http.Request) int64

// CostOne is the default cost: 1 per request.
func CostOne(*http.Request) int64 { return 1 }

// CostHeader returns a CostFunc that reads the cost from the request header
// name as a non-negative decimal integer, and costs def when the header is
// missing or malformed. Trust such a header only from your own clients.
func CostHeader(name string, def int64) CostFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) int64 {
		v := r.Header[name]
		if len(v) == 0 {
			return def
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v[0]), 10, 64)
		if err != nil || n < 0 {
			return def
		}
		return n
	}
}

// CostContentLength returns a CostFunc that costs the request body's
// declared length in units of unit bytes, rounded up, and at least min (a
// request of unknown length, Content-Length -1, costs min).
func CostContentLength(unit, min int64) CostFunc {
	if unit <= 0 {
		unit = 1
	}
	return func(r *http.Request) int64 {
		if r.ContentLength <= 0 {
			return min
		}
		c := r.ContentLength / unit // rounded up below: adding unit-1 first could overflow
		if r.ContentLength%unit != 0 {
			c++
		}
		if c < min {
			return min
		}
		return c
	}
}

// CostTable returns a CostFunc that looks the request up in table, keyed
// by KeyRoute's key ("GET /items/{id}", or "POST /upload" outside a
// ServeMux), then by the method alone ("POST"), and costs def when neither
// is listed. The table is copied.
func CostTable(table map[string]int64, def int64) CostFunc {
	t := make(map[string]int64, len(table))
	for k, v := range table {
		t[k] = v
	}
	return func(r *http.Request) int64 {
		if c, ok := t[KeyRoute(r)]; ok {
			return c
		}
		if c, ok := t[r.Method]; ok {
			return c
		}
		return def
	}
}
