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
// on POST /limit, a token bucket of 1500 refilled at 1 a second
// (limit/redislimit's allowances, whose ledger is inside the key's state).
// As DESIGN-allowances.md section 5 says, after a restart the processes
// admit beyond the new bucket at most the units in their hands, and the new
// bucket loses at most the spends they had not reported: both within the
// ledger's entries at the restart.
func TestAllowanceKeyedRedisRestartedEmpty(t *testing.T) {
	bin := buildLimiterd(t)
	srv := redistest.StartServer(t)
	admin := srv.Client(t)
	const capacity = 1500
	config := fmt.Sprintf("store: redis\nbackends:\n  redis: {addr: %q, local_allowance: true}\n", srv.Addr()) +
		fmt.Sprintf("use_algo: token_bucket\nalgo_settings: {capacity: %d, rate: 1}\n", capacity)
	var procs []*child
	for range 3 {
		procs = append(procs, startChild(t, bin, config, ""))
	}
	decide := restDecider(procs)
	// lent is the sum of the ledger's entries in the hot key's state, in
	// requests: per holder, its units in hand and its spends not reported.
	lent := func() int64 {
		t.Helper()
		keys, err := admin.Keys(context.Background(), "limiterd{hot}*").Result()
		if err != nil || len(keys) > 1 {
			t.Fatalf("hot key's state: %v, %v; want at most one key", keys, err)
		}
		if len(keys) == 0 {
			return 0
		}
		state, err := admin.Get(context.Background(), keys[0]).Result()
		if errors.Is(err, redis.Nil) {
			return 0
		}
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
		return (sum + tokenScale - 1) / tokenScale
	}

	// A key is lent once it has been busy for four periods (1 s): the first
	// phase is paced, two callers a process each waiting 5 ms between
	// calls, so that the bucket is far from spent when it is.
	tallies := []*tally{newTally(), newTally(), newTally()}
	stop := make(chan struct{})
	wg := load(procs, tallies, 2, procSpread, stop, func(p *child, key string) (bool, error) {
		time.Sleep(5 * time.Millisecond)
		return decide(p, key)
	})
	began := time.Now()
	for lent() == 0 && time.Since(began) < 10*time.Second {
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	first := tallies[0].get("hot") + tallies[1].get("hot") + tallies[2].get("hot")
	held1 := lent()
	t.Logf("units lent %v after the first call", time.Since(began).Round(time.Millisecond))
	if held1 == 0 || first >= capacity {
		t.Fatalf("before the first restart: %d admitted, %d lent in %v; want units lent, the bucket not spent", first, held1, time.Since(began))
	}
	srv.Restart(t)
	began = time.Now()
	second := restartPhase(t, procs, decide, "after the first restart", 0)
	refill2 := int64(time.Since(began)/time.Second) + 1
	held2 := lent()
	srv.Restart(t)
	began = time.Now()
	third := restartPhase(t, procs, decide, "after the second restart", 0)
	refill3 := int64(time.Since(began)/time.Second) + 1

	t.Logf("hot key: %d admitted, ledger %d at the first restart; %d admitted after it, ledger %d at the second; %d after the second (capacity %d, refills at most %d and %d)",
		first, held1, second, held2, third, capacity, refill2, refill3)
	if second > capacity+refill2+held1 || second < capacity-held1 {
		t.Errorf("after the first restart: %d admitted, want the capacity %d (and at most %d refilled) within the %d units of the ledger", second, capacity, refill2, held1)
	}
	if third > capacity+refill3+held2 || third < capacity-held2 {
		t.Errorf("after the second restart: %d admitted, want the capacity %d (and at most %d refilled) within the %d units of the ledger", third, capacity, refill3, held2)
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
