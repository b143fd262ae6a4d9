package redislimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/limit/redislimit"
)

// TestAllowanceSaturatedNoWaitForCallInFlight: on a key saturated at a
// store (its last take came back short), a decision that finds no units
// while a call for more is in flight is refused at once, with RetryAfter
// at least its cost's refill, rather than after that call's round trip
// (here held up by a server paused for two seconds).
func TestAllowanceSaturatedNoWaitForCallInFlight(t *testing.T) {
	srv := redistest.StartServer(t)
	clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
	s, err := redislimit.New(srv.Client(t), redislimit.Options{Prefix: "inflight:", Clock: clock,
		LocalAllowance: true, AllowanceLease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	p := limit.TokenBucket(100, limit.PerSecond(100)).Named("tb")
	ctx := context.Background()
	// Busy for 3 s of the clock at 200 decisions a second: hot, and the
	// bucket (100 at 100/s) saturated.
	for range 600 {
		if _, err := s.AllowN(ctx, "k", p, 1); err != nil {
			t.Fatal(err)
		}
		clock.Advance(5 * time.Millisecond)
	}
	if st := s.AllowanceStats(); st.Local == 0 {
		t.Fatalf("the key never turned hot: %+v", st)
	}
	// Past any local refusal time, the next decision calls Redis, which
	// is paused: that call stays in flight.
	clock.Advance(time.Second)
	pauser := srv.Client(t)
	if err := pauser.Do(ctx, "CLIENT", "PAUSE", "2000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		_, err := s.AllowN(ctx, "k", p, 100)
		first <- err
	}()
	time.Sleep(200 * time.Millisecond) // the first decision's call is sent
	start := time.Now()
	dec, err := s.AllowN(ctx, "k", p, 1)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if took > time.Second {
		t.Fatalf("the decision took %v: it waited for the call in flight", took)
	}
	if dec.Allowed || dec.RetryAfter < 10*time.Millisecond {
		t.Fatalf("%+v: want refused, RetryAfter at least a unit's refill (10ms)", dec)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}
