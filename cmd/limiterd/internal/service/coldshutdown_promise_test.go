package service

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/internal/redistest"
)

// TestPromiseColdLeasesGivenBackAtShutdown: docs/limiterd.md's "At
// shutdown they [cold leases] are given back". A limiterd with
// backends.redis.local_allowance and cold_lease takes a cold lease along
// with the first decision of each key on POST /limit, which shows in Redis
// as a ledger entry in the key's state (limit/redislimit/DESIGN-allowances.md,
// 2.2 and 10, "Ledger"); once it has stopped, no key's state holds one.
// The 30 s bound on the give-back is not checked here: only a Redis that
// holds every call for 30 s shows it.
func TestPromiseColdLeasesGivenBackAtShutdown(t *testing.T) {
	t.Parallel()
	const keys = 20
	srv := redistest.StartServer(t)
	p := start(t, fmt.Sprintf("store: redis\nbackends:\n  redis: {addr: %q, local_allowance: true, cold_lease: 1m}\n", srv.Addr())+
		"use_algo: token_bucket\nalgo_settings: {capacity: 100000, rate: 1}\n")
	client := &http.Client{Timeout: 5 * time.Second}
	for i := range keys {
		p.postLimitOK(context.Background(), t, client, fmt.Sprintf("cold-%d", i))
	}
	admin := srv.Client(t)
	if held := coldLedgers(t, admin); len(held) != keys {
		t.Fatalf("%d keys of %d decided hold a lease in Redis, want each (%v)", len(held), keys, held)
	}
	if code := p.stop(); code != 0 {
		t.Fatalf("limiterd exited with %d: %s", code, p.stderr.String())
	}
	if held := coldLedgers(t, admin); len(held) != 0 {
		t.Fatalf("after limiterd stopped, %d keys still lend units: %v", len(held), held)
	}
}

// coldLedgers returns, by Redis key, the ledger entries of the keyed
// store's states ("<state> L <holder>:<amount>:<end>:<seq> ...").
func coldLedgers(t *testing.T, admin *redis.Client) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	iter := admin.Scan(ctx, 0, "limiterd*", 100).Iterator()
	for iter.Next(ctx) {
		v, err := admin.Get(ctx, iter.Val()).Result()
		if err != nil {
			t.Fatalf("GET %s: %v", iter.Val(), err)
		}
		if _, ledger, ok := strings.Cut(v, " L "); ok {
			out[iter.Val()] = ledger
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
