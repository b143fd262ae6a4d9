package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/redislimit"
)

// boundMargin is how far past its deadline a call on a frozen server may
// return: generous for a loaded machine, far below go-redis's 3-s read
// timeout that bounded such calls before.
const boundMargin = 1200 * time.Millisecond

// frozen starts a server, returns a client with go-redis's default options
// (no ContextTimeoutEnabled), as a user would make it, and the server.
func frozen(t *testing.T) (*redistest.Server, *redis.Client) {
	t.Helper()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	return srv, c
}

// storeCall is one kind of call on a store.
type storeCall struct {
	name string
	run  func(ctx context.Context, s limit.Store) (limit.Decision, error)
}

func allowN(p limit.Policy) func(context.Context, limit.Store) (limit.Decision, error) {
	return func(ctx context.Context, s limit.Store) (limit.Decision, error) { return s.AllowN(ctx, "k", p, 1) }
}

// everyCall lists every decision path of a store.
func everyCall() []storeCall {
	tb := limit.TokenBucket(100, limit.PerSecond(1)).Named("tb")
	fw := limit.FixedWindow(100, time.Hour).Named("fw")
	multi := func(ctx context.Context, s limit.Store, fn func(limit.Store, context.Context, []limit.Request, []limit.Decision) ([]limit.Decision, error)) (limit.Decision, error) {
		out, err := fn(s, ctx, []limit.Request{{Key: "k", Policy: tb, Cost: 1}, {Key: "k", Policy: fw, Cost: 1}}, nil)
		if err != nil || len(out) == 0 {
			return limit.Decision{}, err
		}
		return limit.Combine(out), nil
	}
	return []storeCall{
		{"AllowN token bucket", allowN(tb)},
		{"AllowN GCRA", allowN(limit.GCRA(limit.PerSecond(1), 100).Named("gcra"))},
		{"AllowN fixed window", allowN(fw)},
		{"AllowN rolling window", allowN(limit.RollingWindow(100, time.Hour).Named("rw"))},
		{"AllowN sliding window", allowN(limit.SlidingWindow(100, time.Hour).Named("sw"))},
		{"AllowAll", func(ctx context.Context, s limit.Store) (limit.Decision, error) {
			return multi(ctx, s, limit.Store.AllowAll)
		}},
		{"CountAll", func(ctx context.Context, s limit.Store) (limit.Decision, error) {
			return multi(ctx, s, limit.Store.CountAll)
		}},
		{"Settle", func(ctx context.Context, s limit.Store) (limit.Decision, error) { return s.Settle(ctx, "k", tb, 1) }},
		{"Reset", func(ctx context.Context, s limit.Store) (limit.Decision, error) {
			return limit.Decision{}, s.Reset(ctx, "k", tb)
		}},
	}
}

// checkBounded runs every call on store, which must not answer, with a
// deadline of d: each must return DeadlineExceeded within d and the margin;
// and, wrapped in a fail-open policy with Timeout d, must be decided by it
// as fast.
func checkBounded(t *testing.T, store limit.Store, d time.Duration) {
	t.Helper()
	var slowest time.Duration
	defer func() { t.Logf("slowest call with a %v bound: %v", d, slowest) }()
	for _, c := range everyCall() {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		began := time.Now()
		_, err := c.run(ctx, store)
		took := time.Since(began)
		cancel()
		slowest = max(slowest, took)
		if !errors.Is(err, context.DeadlineExceeded) || took > d+boundMargin {
			t.Errorf("%s with a %v deadline: %v after %v", c.name, d, err, took)
		}
		fs, err := limit.WithFailurePolicy(store, limit.FailureOptions{Timeout: d})
		if err != nil {
			t.Fatal(err)
		}
		began = time.Now()
		dec, err := c.run(context.Background(), fs)
		took = time.Since(began)
		slowest = max(slowest, took)
		decided := err == nil && dec.Reason == limit.ReasonFailOpen
		if c.name == "Reset" { // Reset reports the failure: there is nothing to decide
			decided = errors.Is(err, limit.ErrStoreFailed)
		}
		if !decided || took > d+boundMargin {
			t.Errorf("%s behind FailureOptions{Timeout: %v}: %+v %v after %v", c.name, d, dec, err, took)
		}
	}
}

// TestFrozenServerBoundsEveryCall freezes the server (SIGSTOP): every
// decision path returns by its deadline, batched or not, with a client
// that leaves deadlines to its own read timeout.
func TestFrozenServerBoundsEveryCall(t *testing.T) {
	redislimit.SkipWithColdLeases(t, "a key leased before the server froze is decided without it")
	for _, maxBatch := range []int{0, 1} {
		t.Run(fmt.Sprintf("MaxBatch=%d", maxBatch), func(t *testing.T) {
			srv, c := frozen(t)
			store, err := redislimit.New(c, redislimit.Options{MaxBatch: maxBatch})
			if err != nil {
				t.Fatal(err)
			}
			for _, call := range everyCall() { // load the scripts, open connections
				if _, err := call.run(context.Background(), store); err != nil {
					t.Fatalf("%s with the server up: %v", call.name, err)
				}
			}
			srv.Freeze(t)
			defer srv.Thaw(t)
			checkBounded(t, store, 300*time.Millisecond)
		})
	}
}

// TestFrozenClusterBoundsEveryCall is TestFrozenServerBoundsEveryCall on a
// three-master cluster whose nodes are all frozen.
func TestFrozenClusterBoundsEveryCall(t *testing.T) {
	redislimit.SkipWithColdLeases(t, "a key leased before the server froze is decided without it")
	nodes := redistest.StartClusterNodes(t, 3)
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr()
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { c.Close() })
	store, err := redislimit.New(c, redislimit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, call := range everyCall() {
		if _, err := call.run(context.Background(), store); err != nil {
			t.Fatalf("%s with the cluster up: %v", call.name, err)
		}
	}
	for _, n := range nodes {
		n.Freeze(t)
		defer n.Thaw(t)
	}
	checkBounded(t, store, 300*time.Millisecond)
}

// spentAfterThaw thaws srv and returns what key has spent of p once the
// server has applied everything it was sent while frozen: the remaining
// tokens are read until they stay the same for 300 ms.
func spentAfterThaw(t *testing.T, srv *redistest.Server, c *redis.Client, prefix, key string, p limit.Policy) int64 {
	t.Helper()
	srv.Thaw(t)
	reader, err := redislimit.New(c, redislimit.Options{Prefix: prefix, MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	last, stable := int64(-1), time.Now()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		d, err := reader.AllowN(context.Background(), key, p, 0)
		if err != nil {
			continue // connections cut while frozen are redialled
		}
		if d.Remaining != last {
			last, stable = d.Remaining, time.Now()
		} else if time.Since(stable) > 300*time.Millisecond {
			break
		}
	}
	return p.Limit - last
}

// TestGivenUpCallsAreNotCharged: 200 calls that give up (a 20-ms deadline)
// on a frozen server are not charged when it resumes, but for those the
// batches in flight had already written: one call each, as the calls come
// one after another, at most MaxInFlight (2) at a time, twice that on a
// loaded machine, where a batch outlives its caller's deadline by a
// scheduling delay (3 have been seen).
func TestGivenUpCallsAreNotCharged(t *testing.T) {
	redislimit.SkipWithColdLeases(t, "a key leased before the server froze is decided without it")
	t.Run("one-trip", func(t *testing.T) { givenUpNotCharged(t, false) })
	// With allowances, calls that gave up do not make the key hot: no
	// allowance is taken by calls queued on the frozen server.
	t.Run("allowances", func(t *testing.T) { givenUpNotCharged(t, true) })
}

func givenUpNotCharged(t *testing.T, allowances bool) {
	srv, c := frozen(t)
	prefix := testPrefix(t, c)
	store, err := redislimit.New(c, redislimit.Options{Prefix: prefix, LocalAllowance: allowances})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(context.Background()) })
	p := limit.TokenBucket(1000, limit.PerHour(1)).Named("charged")
	if _, err := store.AllowN(context.Background(), "k", p, 0); err != nil {
		t.Fatal(err)
	}
	srv.Freeze(t)
	for i := range 200 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err := store.AllowN(ctx, "k", p, 1)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call %d on a frozen server: %v", i, err)
		}
	}
	if spent := spentAfterThaw(t, srv, c, prefix, "k", p); spent > 4 {
		t.Fatalf("%d tokens spent by 200 calls that gave up; want at most 4 (the batches in flight)", spent)
	}
}

// TestFailurePolicyOnFrozenServerChargesNothingTwice: behind a fail-closed
// policy the refused calls are not charged; behind the local fallback each
// call is counted once, on the fallback, but for the at most MaxInFlight
// calls already written when the server froze.
func TestFailurePolicyOnFrozenServerChargesNothingTwice(t *testing.T) {
	redislimit.SkipWithColdLeases(t, "a key leased before the server froze is decided without it")
	for _, mode := range []limit.FailureMode{limit.FailClosed, limit.FailFallback} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			srv, c := frozen(t)
			prefix := testPrefix(t, c)
			store, err := redislimit.New(c, redislimit.Options{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			local, err := limit.NewMemory(limit.MemoryOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// A short probe window: many probes go to the frozen server.
			fs, err := limit.WithFailurePolicy(store, limit.FailureOptions{Mode: mode, Fallback: local,
				Timeout: 20 * time.Millisecond, Probe: 5 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			p := limit.TokenBucket(1000, limit.PerHour(1)).Named("twice")
			if _, err := fs.AllowN(context.Background(), "k", p, 0); err != nil {
				t.Fatal(err)
			}
			srv.Freeze(t)
			for i := range 200 {
				d, err := fs.AllowN(context.Background(), "k", p, 1)
				want := limit.ReasonFailClosed
				if mode == limit.FailFallback {
					want = limit.ReasonFallback
				}
				if err != nil || d.Reason != want {
					t.Fatalf("call %d: %+v %v, want %v", i, d, err, want)
				}
				if i%20 == 0 {
					time.Sleep(10 * time.Millisecond) // let a probe window pass now and then
				}
			}
			probes := fs.Stats().Failures
			spent := spentAfterThaw(t, srv, c, prefix, "k", p)
			t.Logf("%d probes failed; %d tokens spent on the server", probes, spent)
			if probes < 3 {
				t.Fatalf("only %d probes: the test did not probe the frozen server", probes)
			}
			if spent > 2 {
				t.Fatalf("%d tokens spent on the server by refused or fallback calls; want at most 2", spent)
			}
			if mode == limit.FailFallback {
				d, _ := local.AllowN(context.Background(), "k", p, 0)
				if d.Remaining != p.Limit-200 {
					t.Fatalf("fallback counted %d, want 200", p.Limit-d.Remaining)
				}
			}
		})
	}
}
