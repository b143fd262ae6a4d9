package httplimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/costwise/batcher/limit"

	"github.com/costwise/batcher/middleware/httplimit"
)

// A service that decides limits itself (limiterd, say) writes the same
// headers as the middleware.
func ExampleWriteHeaders() {
	statuses := []httplimit.Status{
		{Policy: "global", Limit: 1000, Remaining: 870, Window: time.Minute, Reset: 8 * time.Second, Allowed: true},
		{Policy: "per-ip", Limit: 100, Remaining: 42, Window: time.Minute, Reset: 16500 * time.Millisecond, Allowed: true},
	}
	now := time.Unix(1_700_000_000, 0)
	for _, f := range []httplimit.HeaderFormat{httplimit.HeaderDraft, httplimit.HeaderTrio, httplimit.HeaderX} {
		h := http.Header{}
		httplimit.WriteHeaders(h, f, now, statuses...)
		fmt.Println(f)
		for _, name := range []string{"RateLimit-Policy", "RateLimit", "RateLimit-Limit", "RateLimit-Remaining",
			"RateLimit-Reset", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
			if v := h.Get(name); v != "" {
				fmt.Printf("  %s: %s\n", name, v)
			}
		}
	}
	// Output:
	// draft
	//   RateLimit-Policy: "per-ip";q=100;w=60
	//   RateLimit: "per-ip";r=42;t=17
	// trio
	//   RateLimit-Limit: 100
	//   RateLimit-Remaining: 42
	//   RateLimit-Reset: 17
	// x
	//   X-RateLimit-Limit: 100
	//   X-RateLimit-Remaining: 42
	//   X-RateLimit-Reset: 1700000017
}

// Two lines wrap any net/http handler: per-client-IP and per-API-key
// limits, decided together.
func ExampleNew() {
	store, err := limit.NewMemory(limit.MemoryOptions{})
	if err != nil {
		log.Fatal(err)
	}
	rl, err := httplimit.New(httplimit.Options{
		Store: store,
		Policies: []httplimit.Policy{
			{Name: "per-ip", Limit: limit.GCRA(limit.PerMinute(100), 2)},
			{Name: "per-key", Limit: limit.TokenBucket(1000, limit.PerMinute(1000)), Key: httplimit.KeyHeader("X-API-Key")},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	srv := httptest.NewServer(rl.Handler(mux))
	defer srv.Close()

	for i := 0; i < 3; i++ {
		res, err := http.Get(srv.URL + "/hello")
		if err != nil {
			log.Fatal(err)
		}
		res.Body.Close()
		fmt.Printf("%d %s %s retry=%s\n", res.StatusCode, res.Header.Get("RateLimit-Policy"), res.Header.Get("RateLimit"), res.Header.Get("Retry-After"))
	}
	// Output:
	// 200 "per-ip";q=2;w=2 "per-ip";r=1;t=1 retry=
	// 200 "per-ip";q=2;w=2 "per-ip";r=0;t=2 retry=
	// 429 "per-ip";q=2;w=2 "per-ip";r=0;t=1 retry=1
}
