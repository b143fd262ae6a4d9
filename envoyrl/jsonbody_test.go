package envoyrl_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/costwise/batcher/envoyrl"
)

// JSONHandler reads a body up to Options.MaxJSONBodyBytes, 1 MiB when it is
// not set, and answers a larger one 413.
func TestJSONHandlerBodyBound(t *testing.T) {
	rules, err := envoyrl.Parse([]envoyrl.File{{Name: "gw.yaml", Content: []byte(
		"domain: gw\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 100}\n")}})
	if err != nil {
		t.Fatal(err)
	}
	padded := func(n int) string {
		req := `{"domain":"gw","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`
		return req + strings.Repeat(" ", n-len(req))
	}
	for _, c := range []struct {
		name  string
		set   int64
		bound int
	}{{"default", 0, envoyrl.DefaultMaxJSONBodyBytes}, {"set", 3 << 20, 3 << 20}} {
		t.Run(c.name, func(t *testing.T) {
			store, err := envoyrl.NewMemoryStore(envoyrl.MemoryOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { store.Close() })
			svc := envoyrl.NewService(store, envoyrl.Options{MaxJSONBodyBytes: c.set})
			svc.SetRules(rules)
			ts := httptest.NewServer(envoyrl.JSONHandler(svc))
			t.Cleanup(ts.Close)
			for _, n := range []int{c.bound, c.bound + 1} {
				resp, err := http.Post(ts.URL, "application/json", strings.NewReader(padded(n)))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				want := http.StatusOK
				if n > c.bound {
					want = http.StatusRequestEntityTooLarge
				}
				if resp.StatusCode != want {
					t.Errorf("a body of %d bytes (bound %d): %d, want %d", n, c.bound, resp.StatusCode, want)
				}
			}
		})
	}
}
