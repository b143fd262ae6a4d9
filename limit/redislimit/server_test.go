package redislimit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/redislimit"
	"github.com/redis/go-redis/v9"
)

func serverStore(t *testing.T, c *redis.Client) *redislimit.Store {
	t.Helper()
	s, err := redislimit.New(c, redislimit.Options{Prefix: testPrefix(t, c)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestExpiryIsTimeToRest checks, on the server's clock, that every written
// key expires when it is back at rest, and that a denied decision writes
// nothing.
func TestExpiryIsTimeToRest(t *testing.T) {
	ctx := context.Background()
	c := connect(t)
	s := serverStore(t, c)
	cases := []struct {
		p        limit.Policy
		cost     int64
		min, max time.Duration
	}{
		{limit.TokenBucket(10, limit.PerSecond(10)).Named("tb"), 5, 400 * time.Millisecond, 500 * time.Millisecond},
		{limit.GCRA(limit.PerSecond(10), 10).Named("gcra"), 5, 400 * time.Millisecond, 501 * time.Millisecond},
		{limit.RollingWindow(10, 3*time.Second).Named("rolling"), 5, 2900 * time.Millisecond, 3 * time.Second},
		{limit.SlidingWindow(10, time.Hour).Named("sliding"), 5, time.Hour, 2 * time.Hour},
		{limit.FixedWindow(10, 24*time.Hour).Named("fixed"), 5, 0, 24 * time.Hour},
	}
	for _, cs := range cases {
		d, err := s.AllowN(ctx, "exp", cs.p, cs.cost)
		if err != nil || !d.Allowed {
			t.Fatalf("%s: %+v %v", cs.p.Name, d, err)
		}
		key := s.Key("exp", cs.p)
		ttl, err := c.PTTL(ctx, key).Result()
		if err != nil || ttl <= cs.min-100*time.Millisecond || ttl > cs.max {
			t.Errorf("%s: PTTL %v, want in (%v, %v]; ResetAfter %v", cs.p.Name, ttl, cs.min, cs.max, d.ResetAfter)
		}
		if ttl < d.ResetAfter-100*time.Millisecond || ttl > d.ResetAfter+time.Millisecond {
			t.Errorf("%s: PTTL %v far from ResetAfter %v", cs.p.Name, ttl, d.ResetAfter)
		}
		before := dump(t, c, key)
		d, err = s.AllowN(ctx, "exp", cs.p, cs.p.Limit)
		if err != nil || d.Allowed {
			t.Fatalf("%s: cost of the limit on a half-spent key: %+v %v", cs.p.Name, d, err)
		}
		if after := dump(t, c, key); after != before {
			t.Errorf("%s: a denied decision changed the key: %q -> %q", cs.p.Name, before, after)
		}
		d, _ = s.AllowN(ctx, "idle", cs.p, 0)
		if n, _ := c.Exists(ctx, s.Key("idle", cs.p)).Result(); n != 0 || !d.Allowed {
			t.Errorf("%s: a cost of 0 wrote a key", cs.p.Name)
		}
	}
}

func dump(t *testing.T, c *redis.Client, key string) string {
	t.Helper()
	switch typ := c.Type(context.Background(), key).Val(); typ {
	case "list":
		v, _ := c.LRange(context.Background(), key, 0, -1).Result()
		return typ + ":" + join(v)
	default:
		v, _ := c.Get(context.Background(), key).Result()
		return typ + ":" + v
	}
}

func join(v []string) string {
	out := ""
	for _, x := range v {
		out += x + ","
	}
	return out
}

// TestScriptReload checks that the store loads its script again after the
// server forgot it (SCRIPT FLUSH, as after a restart).
func TestScriptReload(t *testing.T) {
	ctx := context.Background()
	c := connect(t)
	s := serverStore(t, c)
	p := limit.GCRA(limit.PerSecond(1), 2).Named("reload")
	if d, err := s.AllowN(ctx, "k", p, 1); err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if d, err := s.AllowN(ctx, "k", p, 1); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("after SCRIPT FLUSH: %+v %v", d, err)
	}
}

// TestServerTimeConcurrent has 64 goroutines over 4 clients spend on one
// token bucket for about a second of the server's own clock. The admitted
// count can never pass capacity + rate x the server time elapsed between
// two TIME readings around the run; and since demand exceeds the rate,
// what was admitted plus what remains at the end comes within 1 % of it
// (the tokens that accrued and were not spent are the remaining ones).
func TestServerTimeConcurrent(t *testing.T) {
	const capacity, rate = 100, 200
	ctx := context.Background()
	var stores []*redislimit.Store
	var prefix string
	for i := 0; i < 4; i++ {
		c := connect(t)
		if i == 0 {
			prefix = testPrefix(t, c)
		}
		s, _ := redislimit.New(c, redislimit.Options{Prefix: prefix})
		stores = append(stores, s)
	}
	timer := connect(t)
	p := limit.TokenBucket(capacity, limit.PerSecond(rate)).Named("hot")
	var admitted atomic.Int64
	var failed atomic.Int64
	var ready, wg sync.WaitGroup
	begin := make(chan struct{})
	var stop time.Time
	for g := 0; g < 64; g++ {
		wg.Add(1)
		ready.Add(1)
		go func(s *redislimit.Store) {
			defer wg.Done()
			// A first call opens this goroutine's connection before the clock starts.
			_, err := s.AllowN(ctx, "warm", p, 0)
			ready.Done()
			<-begin
			for err == nil && time.Now().Before(stop) {
				var d limit.Decision
				if d, err = s.AllowN(ctx, "hot", p, 1); err == nil && d.Allowed {
					admitted.Add(1)
				}
			}
			if err != nil {
				failed.Add(1)
			}
		}(stores[g%4])
	}
	ready.Wait()
	start, err := timer.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	stop = time.Now().Add(time.Second)
	close(begin)
	wg.Wait()
	// Units a store holds under LocalAllowance come back with Close.
	for _, s := range stores {
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	last, err := stores[0].AllowN(ctx, "hot", p, 0)
	end, _ := timer.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if failed.Load() > 0 {
		t.Fatalf("%d calls failed", failed.Load())
	}
	elapsed := end.Sub(start)
	bound := capacity + int64(elapsed.Seconds()*rate)
	got := admitted.Load()
	t.Logf("admitted %d in %v of server time, %d remain; bound %d", got, elapsed, last.Remaining, bound)
	if got > bound {
		t.Fatalf("admitted %d > bound %d", got, bound)
	}
	if float64(got+last.Remaining) < 0.99*float64(bound) {
		t.Fatalf("admitted %d + remaining %d < 99%% of bound %d", got, last.Remaining, bound)
	}
}

// TestServerDown checks that a stopped server gives a *limit.StoreError
// within the context's deadline, and that the failure policies decide.
func TestServerDown(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	s, _ := redislimit.New(c, redislimit.Options{})
	p := limit.TokenBucket(4, limit.PerMinute(1)).Named("down")
	ctx := context.Background()
	if d, err := s.AllowN(ctx, "k", p, 1); err != nil || !d.Allowed {
		t.Fatalf("before the stop: %+v %v", d, err)
	}
	srv.Kill()
	_, err := s.AllowN(ctx, "k", p, 1)
	if !errors.Is(err, limit.ErrStoreFailed) {
		t.Fatalf("stopped server: %v", err)
	}
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	began := time.Now()
	if _, err := s.AllowN(tctx, "k", p, 1); err == nil {
		t.Fatal("no error from a stopped server")
	}
	if waited := time.Since(began); waited > 2*time.Second {
		t.Fatalf("waited %v past a 50ms deadline", waited)
	}
	var failures atomic.Int64
	for _, mode := range []limit.FailureMode{limit.FailOpen, limit.FailClosed, limit.FailFallback} {
		fs, err := limit.WithFailurePolicy(s, limit.FailureOptions{Mode: mode, Replicas: 2,
			OnFailure: func(error) { failures.Add(1) }})
		if err != nil {
			t.Fatal(err)
		}
		allowed := 0
		for i := 0; i < 4; i++ {
			d, err := fs.AllowN(ctx, "k", p, 1)
			if err != nil || d.Err == nil || !errors.Is(d.Err, limit.ErrStoreFailed) {
				t.Fatalf("mode %d: %+v %v", mode, d, err)
			}
			if d.Allowed {
				allowed++
			}
		}
		want := map[limit.FailureMode]int{limit.FailOpen: 4, limit.FailClosed: 0, limit.FailFallback: 2}[mode]
		if allowed != want {
			t.Errorf("mode %d admitted %d of 4, want %d (local fallback: the limit of 4 over 2 replicas)", mode, allowed, want)
		}
		if st := fs.Stats(); st.Failures != 1 || st.Degraded != 4 {
			t.Errorf("mode %d: stats %+v, want 1 failure (then the probe interval) and 4 degraded", mode, st)
		}
	}
	if failures.Load() != 3 {
		t.Errorf("OnFailure called %d times, want 3", failures.Load())
	}
}
