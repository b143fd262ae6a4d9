package httplimit_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/redislimit"
	"github.com/costwise/batcher/middleware/httplimit"
)

// TestFrozenRedisDefaults leaves every failure option at its default and
// freezes the Redis server (SIGSTOP) under a go-redis client with default
// options, as in the README quick start. The docs promise: fail open by
// default (admitted, without rate-limit headers), a store timeout of
// 100 ms, then the store left alone for FailClosedRetryAfter (1 s by
// default) with requests decided at once, so that a dead Redis does not
// cost every request a timeout; and under FailClosed a 503 with
// Retry-After 1.
func TestFrozenRedisDefaults(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	store, err := redislimit.New(c, redislimit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var failures atomic.Int64
	policies := []httplimit.Policy{{Name: "per-ip", Limit: limit.FixedWindow(100, time.Hour)}}
	ts := serve(t, httplimit.Options{Policies: policies, Store: store,
		OnStoreFailure: func(error) { failures.Add(1) }})
	if res := get(t, ts); res.code != 200 || res.h.Get("RateLimit") == "" {
		t.Fatalf("with Redis up: %d %v", res.code, res.h)
	}
	srv.Freeze(t)
	defer srv.Thaw(t)

	start := time.Now()
	res := get(t, ts)
	took := time.Since(start)
	if res.code != 200 || res.h.Get("RateLimit") != "" || res.h.Get("Retry-After") != "" {
		t.Errorf("frozen Redis, default mode: %d %v; want admitted without rate-limit fields (fail open)", res.code, res.h)
	}
	if took < 100*time.Millisecond || took > 1300*time.Millisecond {
		t.Errorf("frozen Redis: the request took %v; want the default store timeout of 100 ms (plus the machine's delays)", took)
	}
	if n := failures.Load(); n != 1 {
		t.Fatalf("store failures reported: %d, want 1", n)
	}
	// Within the default probe window of 1 s from that failure, requests
	// are decided at once, without going to the store again: only those
	// sent in its first 500 ms count, so that a machine stalled for up to
	// half a second cannot reach past it.
	failedAt, sent := time.Now(), 0
	for ; sent < 10 && time.Since(failedAt) < 500*time.Millisecond; sent++ {
		if res := get(t, ts); res.code != 200 || res.h.Get("RateLimit") != "" {
			t.Fatalf("request %d in the probe window: %d %v", sent, res.code, res.h)
		}
	}
	if n := failures.Load(); n != 1 || sent == 0 {
		t.Errorf("%d store failures after %d requests in the probe window: they went to the frozen store", n, sent)
	}

	// The same frozen store, failing closed with the default retry delay.
	ts = serve(t, httplimit.Options{Policies: policies, Store: store, OnStoreError: httplimit.FailClosed})
	res = get(t, ts)
	if res.code != 503 || res.h.Get("Retry-After") != "1" {
		t.Errorf("frozen Redis, FailClosed: %d, Retry-After %q; want 503 with the default Retry-After 1", res.code, res.h.Get("Retry-After"))
	}
	if p := problem(t, res); p["status"] != float64(503) {
		t.Errorf("problem %v", p)
	}
}
