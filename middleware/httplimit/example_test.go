package httplimit_test

import (
	"fmt"
	"net/http"
	"time"

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
