package service

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/internal/redistest"
)

// TestAllowanceRedisRestartedEmpty restarts the redis-server of three
// limiterd processes (killed and started again, empty, on its port) twice,
// with the load stopped meanwhile. The first time the processes hold units
// of the hot key: those were counted in the lost state, and after the
// restart they are at most what is admitted beyond the limit (1500), which
// is admitted in full. The second time the limit was spent before: the new
// state's limit is admitted, exactly.
func TestAllowanceRedisRestartedEmpty(t *testing.T) {
	procs, srv, admin := startAllowanceProcs(t)
	const limit = 1500
	redistest.AwayFromWindowEdge(time.Hour, time.Minute)
	key := fmt.Sprintf("gw_k_hot_%d", time.Now().Truncate(time.Hour).Unix())
	decide, failedOpen := failOpenDecider(t, procs)
	phase := func(name string, n int64) int64 { return restartPhase(t, procs, decide, name, n) }
	counter := func() int64 {
		t.Helper()
		n, err := admin.Get(context.Background(), key).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		return n
	}

	// Held: the counter less what was admitted, as nothing was refused.
	first := phase("before the first restart", 500)
	held := counter() - first
	srv.Restart(t)
	second := phase("after the first restart", 0)
	top := counter()
	srv.Restart(t)
	third := phase("after the second restart", 0)

	t.Logf("hot key: %d admitted, %d held at the first restart; %d admitted after it (counter %d at the second); %d after the second (limit %d); %d answers failed open",
		first, held, second, top, third, limit, failedOpen.Load())
	if first < 500 || first > limit || held <= 0 {
		t.Fatalf("before the first restart: %d admitted, %d held; want 500 to %d admitted and some held", first, held, limit)
	}
	if n := failedOpen.Load(); n > 0 {
		t.Errorf("%d answers failed open: Redis did not answer the processes after its restart", n)
	}
	if second > limit+held || second < limit {
		t.Errorf("after the first restart: %d admitted, want the limit %d and at most the %d units held", second, limit, held)
	}
	if third != limit {
		t.Errorf("after the second restart, the limit spent before it: %d admitted, want the new state's limit %d", third, limit)
	}
}

// restartPhase runs the load until the three have admitted at least n on
// the hot key, or, with n 0, until each refuses it, and returns what they
// admitted on it.
func restartPhase(t *testing.T, procs []*child, decide func(p *child, key string) (bool, error), name string, n int64) int64 {
	t.Helper()
	tallies := []*tally{newTally(), newTally(), newTally()}
	stop := make(chan struct{})
	wg := load(procs, tallies, procCallers, procSpread, stop, decide)
	ok, why := true, ""
	if n > 0 {
		waitHot(t, tallies, n, stop, wg)
	} else {
		ok, why = saturated(tallies, []int{0, 1, 2}, 0, hotRun, 30*time.Second)
	}
	close(stop)
	wg.Wait()
	if !ok {
		t.Fatalf("%s: the hot key was not refused %d times in a row at every process within 30 s: %s", name, hotRun, why)
	}
	return tallies[0].get("hot") + tallies[1].get("hot") + tallies[2].get("hot")
}

// TestAllowanceKeyedRedisRestartedEmpty is TestAllowanceRedisRestartedEmpty
// on POST /limit, a fixed window of 300 in 15 minutes (limit/redislimit's
// allowances, whose ledger is inside the key's state): after a restart the
// processes spend at most the units in their hands beyond the new state's
// limit, and the new state loses at most the spends they had not reported
// (both within the ledger's entries at the restart), as DESIGN-allowances.md
// section 5 says.
func TestAllowanceKeyedRedisRestartedEmpty(t *testing.T) {
	bin := buildLimiterd(t)
	srv := redistest.StartServer(t)
	admin := srv.Client(t)
	// Counted in thousandths of a request, the limit times the window in
	// µs must stay under 2^48.
	const limit = 300
	config := fmt.Sprintf("store: redis\nbackends:\n  redis: {addr: %q, local_allowance: true}\n", srv.Addr()) +
		fmt.Sprintf("use_algo: fixed_window\nalgo_settings: {window_size: 900, max_requests: %d}\n", limit)
	var procs []*child
	for range 3 {
		procs = append(procs, startChild(t, bin, config, ""))
	}
	redistest.AwayFromWindowEdge(15*time.Minute, time.Minute)
	decide := restDecider(procs)
	// lent is the sum of the ledger's entries in the hot key's state: per
	// holder, its units in hand and its spends not yet reported.
	lent := func() int64 {
		t.Helper()
		keys, err := admin.Keys(context.Background(), "limiterd{hot}*").Result()
		if err != nil || len(keys) != 1 {
			t.Fatalf("hot key's state: %v, %v; want one key", keys, err)
		}
		state, err := admin.Get(context.Background(), keys[0]).Result()
		if err != nil {
			t.Fatal(err)
		}
		_, ledger, _ := strings.Cut(state, " L ")
		var sum int64
		for _, e := range strings.Fields(ledger) {
			parts := strings.Split(e, ":")
			if len(parts) != 4 {
				t.Fatalf("ledger entry %q in %q", e, state)
			}
			n, _ := strconv.ParseInt(parts[1], 10, 64)
			sum += n
		}
		return sum
	}

	first := restartPhase(t, procs, decide, "before the first restart", 100)
	held1 := lent()
	srv.Restart(t)
	second := restartPhase(t, procs, decide, "after the first restart", 0)
	held2 := lent()
	srv.Restart(t)
	third := restartPhase(t, procs, decide, "after the second restart", 0)

	t.Logf("hot key: %d admitted, ledger %d at the first restart; %d admitted after it, ledger %d at the second; %d after the second (limit %d)",
		first, held1, second, held2, third, limit)
	if first < 100 || first > limit || held1 <= 0 {
		t.Fatalf("before the first restart: %d admitted, ledger %d; want 100 to %d admitted and some lent", first, held1, limit)
	}
	if second > limit+held1 || second < limit-held1 {
		t.Errorf("after the first restart: %d admitted, want the limit %d within the %d units of the ledger", second, limit, held1)
	}
	if third > limit || third < limit-held2 {
		t.Errorf("after the second restart, the limit spent before it: %d admitted, want the limit %d less at most the %d units of the ledger", third, limit, held2)
	}
}

// failOpenDecider asks one process's Envoy API, as envoyDecider does, and
// counts apart the answers given without Redis (fail_open), as refusals:
// they are the failure policy's, not the allowances'.
func failOpenDecider(t *testing.T, procs []*child) (func(p *child, key string) (bool, error), *atomic.Int64) {
	clients := map[*child]rlsv3.RateLimitServiceClient{}
	for _, p := range procs {
		clients[p] = rlsv3.NewRateLimitServiceClient(dial(t, p.grpc))
	}
	var failed atomic.Int64
	return func(p *child, key string) (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := clients[p].ShouldRateLimit(ctx, envoyReq("k", key))
		if err != nil {
			return false, err
		}
		for _, h := range resp.ResponseHeadersToAdd {
			if h.Key == FailOpenTrailer {
				failed.Add(1)
				return false, nil
			}
		}
		return resp.OverallCode == rlsv3.RateLimitResponse_OK, nil
	}, &failed
}
