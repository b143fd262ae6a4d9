package httplimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/middleware/httplimit"
)

type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(int)             {}

// BenchmarkMiddleware is the admitted path of one client, for profiling;
// bench/httppeers compares it with other middlewares.
func BenchmarkMiddleware(b *testing.B) {
	for _, f := range []httplimit.HeaderFormat{httplimit.HeaderDraft, httplimit.HeaderX, httplimit.HeaderNone} {
		b.Run(f.String(), func(b *testing.B) {
			store, err := limit.NewMemory(limit.MemoryOptions{})
			if err != nil {
				b.Fatal(err)
			}
			m, err := httplimit.New(httplimit.Options{
				Policies: []httplimit.Policy{{Name: "per-ip", Limit: limit.FixedWindow(100_000_000, time.Second)}},
				Store:    store, Headers: f,
			})
			if err != nil {
				b.Fatal(err)
			}
			h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			r, _ := http.NewRequest("GET", "/", nil)
			r.RemoteAddr = "192.0.2.1:1234"
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, r)
			}
		})
	}
}
