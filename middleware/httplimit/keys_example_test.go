package httplimit_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/costwise/batcher/middleware/httplimit"
)

// Behind a trusted proxy, the client is the rightmost address the proxies
// did not add; IPv6 clients are grouped by /64.
func ExampleKeyIP() {
	proxies, err := httplimit.ParsePrefixes("10.0.0.0/8")
	if err != nil {
		log.Fatal(err)
	}
	key := httplimit.KeyIP(&httplimit.ClientIP{TrustedProxies: proxies, Header: httplimit.ProxyHeaderXFF})

	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.2:4711" // the proxy
	r.Header.Set("X-Forwarded-For", "198.51.100.1, 203.0.113.9, 10.0.0.7")
	fmt.Println(key(r))

	r.RemoteAddr = "[2001:db8:1:2:3:4:5:6]:443" // no proxy: the header is not read
	fmt.Println(key(r))
	// Output:
	// 203.0.113.9
	// 2001:db8:1:2::/64
}

// KeyRoute gives one budget per route: the ServeMux pattern when the
// middleware runs inside the mux, the method and path otherwise.
func ExampleKeyRoute() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("inside the mux:", httplimit.KeyRoute(r))
	})
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/items/42", nil))
	fmt.Println("in front of it:", httplimit.KeyRoute(httptest.NewRequest("GET", "/items/42", nil)))
	// Output:
	// inside the mux: GET /items/{id}
	// in front of it: GET /items/42
}

type tenantKey struct{}

// An authentication middleware earlier in the chain leaves the tenant in
// the request's context; KeyContext keys by it.
func ExampleKeyContext() {
	key := httplimit.KeyContext(tenantKey{})
	r := httptest.NewRequest("GET", "/", nil)
	fmt.Printf("%q\n", key(r)) // no tenant: the policy does not apply
	fmt.Printf("%q\n", key(r.WithContext(context.WithValue(r.Context(), tenantKey{}, "acme"))))
	fmt.Printf("%q\n", key(r.WithContext(context.WithValue(r.Context(), tenantKey{}, int64(7)))))
	// Output:
	// ""
	// "acme"
	// "7"
}

// KeyJoin gives one budget per combination: here per tenant and route. A
// request missing a part is not limited by the policy.
func ExampleKeyJoin() {
	key := httplimit.KeyJoin(httplimit.KeyContext(tenantKey{}), httplimit.KeyRoute)
	r := httptest.NewRequest("POST", "/orders", nil)
	fmt.Printf("%q\n", key(r.WithContext(context.WithValue(r.Context(), tenantKey{}, "acme"))))
	fmt.Printf("%q\n", key(r))
	// Output:
	// "acme|POST /orders"
	// ""
}

// CostContentLength charges uploads by size: here one unit per started
// KiB, and at least 1.
func ExampleCostContentLength() {
	cost := httplimit.CostContentLength(1024, 1)
	for _, body := range []string{"", "hello", strings.Repeat("x", 1024), strings.Repeat("x", 5000)} {
		r := httptest.NewRequest("POST", "/upload", strings.NewReader(body))
		fmt.Println(len(body), "bytes cost", cost(r))
	}
	r := httptest.NewRequest("POST", "/upload", strings.NewReader("streamed"))
	r.ContentLength = -1 // unknown length
	fmt.Println("unknown length costs", cost(r))
	// Output:
	// 0 bytes cost 1
	// 5 bytes cost 1
	// 1024 bytes cost 1
	// 5000 bytes cost 5
	// unknown length costs 1
}
