package httppeers

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	tollbooth "github.com/didip/tollbooth/v7"
	"github.com/go-chi/httprate"
	sethlimit "github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/middleware/httplimit"
)

// Every limiter admits a generous 1e8 requests per second per client IP,
// so the benchmark measures the admitted path every request takes, which
// it checks (see admittedOnly); keys are pre-generated client addresses.
const (
	quota  = 100_000_000
	window = time.Second
	nIPs   = 4096
)

// sethvargoInterval is the memorystore Interval at which Tokens = quota
// admit quota requests and more. At each Interval tick memorystore sets a
// bucket to min(Tokens, ticks × Interval/Tokens), Interval counted in
// nanoseconds: with Tokens 1e8 and an Interval of 1 s a bucket holds 10
// tokens after its first second, and nearly every request is denied. With
// an Interval of Tokens² ns (116 days) the bucket starts full and is not
// refilled within a run, which its 1e8 tokens cover.
const sethvargoInterval = time.Duration(quota) * quota

// discard is a ResponseWriter that keeps headers (cleared per request) and
// drops the body: the cheapest writer, so the middleware's cost shows. It
// counts the requests answered with a status other than 200.
type discard struct {
	h      http.Header
	denied int64
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(code int) {
	if code != http.StatusOK {
		d.denied++
	}
}

// admittedOnly reports the share of requests answered with a status other
// than 200 and fails the benchmark when it is more than one in 10,000: a
// benchmark of the admitted path that measured denials would flatter
// whichever side denies.
func admittedOnly(b *testing.B, denied int64) {
	b.Helper()
	b.ReportMetric(100*float64(denied)/float64(b.N), "%denied")
	if denied*10_000 > int64(b.N) {
		b.Fatalf("%d of %d requests denied on the admitted path", denied, b.N)
	}
}

var empty = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})

func requests() []*http.Request {
	rs := make([]*http.Request, nIPs)
	for i := range rs {
		r, _ := http.NewRequest("GET", "http://example.com/items/1", nil)
		r.RemoteAddr = "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255) + ":51234"
		rs[i] = r
	}
	return rs
}

type peer struct {
	name string
	make func(b *testing.B) http.Handler
}

var peers = []peer{
	{"none", func(*testing.B) http.Handler { return empty }},
	{"batcher-httplimit", func(b *testing.B) http.Handler {
		store, err := limit.NewMemory(limit.MemoryOptions{})
		if err != nil {
			b.Fatal(err)
		}
		m, err := httplimit.New(httplimit.Options{
			Policies: []httplimit.Policy{{Name: "per-ip", Limit: limit.FixedWindow(quota, window)}},
			Store:    store,
		})
		if err != nil {
			b.Fatal(err)
		}
		return m.Handler(empty)
	}},
	{"batcher-httplimit-gcra", func(b *testing.B) http.Handler {
		store, err := limit.NewMemory(limit.MemoryOptions{})
		if err != nil {
			b.Fatal(err)
		}
		m, err := httplimit.New(httplimit.Options{
			Policies: []httplimit.Policy{{Name: "per-ip", Limit: limit.GCRA(limit.Rate{Count: quota, Period: window}, quota)}},
			Store:    store,
		})
		if err != nil {
			b.Fatal(err)
		}
		return m.Handler(empty)
	}},
	{"go-chi-httprate", func(*testing.B) http.Handler {
		// KeyByIP keys on RemoteAddr, as the other peers here do.
		//lint:ignore SA1019 the same key as every other peer of the benchmark
		return httprate.LimitBy(quota, window, httprate.KeyByIP)(empty)
	}},
	{"sethvargo-httplimit", func(b *testing.B) http.Handler {
		store, err := memorystore.New(&memorystore.Config{Tokens: quota, Interval: sethvargoInterval})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = store.Close(b.Context()) })
		m, err := sethlimit.NewMiddleware(store, sethlimit.IPKeyFunc())
		if err != nil {
			b.Fatal(err)
		}
		return m.Handle(empty)
	}},
	{"didip-tollbooth", func(*testing.B) http.Handler {
		lmt := tollbooth.NewLimiter(quota, nil)
		lmt.SetIPLookups([]string{"RemoteAddr"})
		return tollbooth.LimitHandler(lmt, empty)
	}},
}

// BenchmarkOverhead serves requests from 4096 client IPs on every core.
func BenchmarkOverhead(b *testing.B) {
	rs := requests()
	for _, p := range peers {
		b.Run(p.name, func(b *testing.B) {
			h := p.make(b)
			var next atomic.Uint64
			var denied atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				w := &discard{h: http.Header{}}
				i := next.Add(997)
				for pb.Next() {
					i++
					clear(w.h)
					h.ServeHTTP(w, rs[i%nIPs])
				}
				denied.Add(w.denied)
			})
			b.StopTimer()
			admittedOnly(b, denied.Load())
		})
	}
}

// BenchmarkOverheadSerial serves one client IP from one goroutine: the
// cost of the middleware alone, without contention.
func BenchmarkOverheadSerial(b *testing.B) {
	rs := requests()
	for _, p := range peers {
		b.Run(p.name, func(b *testing.B) {
			h := p.make(b)
			w := &discard{h: http.Header{}}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, rs[0])
			}
			admittedOnly(b, w.denied)
		})
	}
}
