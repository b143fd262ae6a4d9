package httplimit_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/redislimit"
	"github.com/costwise/batcher/middleware/httplimit"
	"github.com/costwise/batcher/middleware/promlimit"
)

// TestShadowWithLocalAllowances: shadow mode keeps its meaning with the
// Redis store's local allowances on: the store admits what it admits
// without them (a shadow denial spends nothing), every request passes, and
// the metrics and the Redis state come out the same.
func TestShadowWithLocalAllowances(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, p := range []limit.Policy{
		limit.TokenBucket(20, limit.PerHour(1)),
		limit.GCRA(limit.PerHour(1), 20),
		limit.FixedWindow(20, time.Hour),
		limit.SlidingWindow(20, time.Hour),
	} {
		t.Run(string(p.Algorithm), func(t *testing.T) {
			type outcome struct{ allowed, shadow, left float64 }
			run := func(allowances bool) outcome {
				clk := newFakeClock()
				prefix := fmt.Sprintf("shadow-%s-%v:", p.Algorithm, allowances)
				c := srv.Client(t)
				store, err := redislimit.New(c, redislimit.Options{Prefix: prefix, Clock: clk,
					LocalAllowance: allowances})
				if err != nil {
					t.Fatal(err)
				}
				reg := prometheus.NewRegistry()
				ts := serve(t, httplimit.Options{Policies: []httplimit.Policy{{Name: "per-ip", Limit: p}},
					Store: store, Now: clk.Now, Shadow: true, MetricsProvider: promlimit.New(reg)})
				lent := false
				for i := range 60 {
					if res := get(t, ts); res.code != 200 {
						t.Fatalf("shadow mode refused request %d: %d", i, res.code)
					}
					// Four requests a quarter second: a key busy enough to be
					// lent (nothing refills in that time).
					if i%4 == 3 {
						clk.Advance(250 * time.Millisecond)
					}
					v, _ := c.Get(context.Background(), store.Key("127.0.0.1", p.Named("per-ip"))).Result()
					lent = lent || strings.Contains(v, " L ")
				}
				if lent != allowances {
					t.Fatalf("units lent: %v, with allowances %v", lent, allowances)
				}
				if err := store.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
				one, err := redislimit.New(srv.Client(t), redislimit.Options{Prefix: prefix, Clock: clk})
				if err != nil {
					t.Fatal(err)
				}
				left := 0.0
				for {
					dec, err := one.AllowN(context.Background(), "127.0.0.1", p.Named("per-ip"), 1)
					if err != nil {
						t.Fatal(err)
					}
					if !dec.Allowed {
						break
					}
					left++
				}
				return outcome{decisions(t, reg, "allowed"), decisions(t, reg, "shadow_denied"), left}
			}
			off, on := run(false), run(true)
			if on != off || on.allowed != 20 || on.shadow != 40 || on.left != 0 {
				t.Fatalf("with allowances %+v, without %+v: want the same, 20 allowed, 40 shadow-denied, none left", on, off)
			}
		})
	}
}
