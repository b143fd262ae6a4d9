package redislimit_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/limit/redislimit"
)

// TestAllowanceSaturatedNoWaitForCallInFlight: on a key saturated at a
// store (its last take came back short), a decision that finds too few
// units while a call for more is in flight is refused at once, with
// RetryAfter at least its cost's refill, rather than after that call's
// round trip (here held up by a server paused for two seconds).
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
	// Past any local refusal time (the take grid's next point, 200 ms
	// at most), the next decision calls Redis, which is paused: that call
	// stays in flight. Idle for less than a renewal period (500 ms), the
	// key is neither given back nor renewed meanwhile (either would send
	// the decisions to the paused server on the one-trip path).
	clock.Advance(250 * time.Millisecond)
	// The renewal goroutine may renew the key now (it is low): let it
	// finish before Redis pauses, so that the call in flight is the
	// decision's and the last answer the renewal's (short: 40 units free
	// at the grid's point at 3.2 s, of the 50 it asks for).
	settle(t, s)
	pauser := srv.Client(t)
	if err := pauser.Do(ctx, "CLIENT", "PAUSE", "2000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		_, err := s.AllowN(ctx, "k", p, 100)
		first <- err
	}()
	// The first decision's call is sent (on a busy machine that can take
	// longer than any fixed sleep; the decision below then sent the call
	// itself and waited for the paused server).
	for deadline := time.Now().Add(10 * time.Second); !s.CallInFlightForTest("k", p); {
		if time.Now().After(deadline) {
			t.Fatal("the first decision sent no call in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	// A decision of the whole bucket: more than the last answer left
	// Redis to have for this store at its retry time (the renewal asked
	// for 50), so no refusal time covers it; only the call in flight can
	// answer it fast.
	start := time.Now()
	dec, err := s.AllowN(ctx, "k", p, 100)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if took > time.Second {
		t.Fatalf("the decision took %v: it waited for the call in flight", took)
	}
	if dec.Allowed || dec.RetryAfter < time.Second {
		t.Fatalf("%+v: want refused, RetryAfter at least its cost's refill (1s)", dec)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

// renewingCold returns a store (and its clock) whose cold lease on "k" (a token bucket of
// 1,000 an hour, under p) is being renewed early, 8 decisions made, while
// its server is paused for pause: the renewal's call is in flight.
func renewingCold(t *testing.T, pause time.Duration) (*redistest.Server, *limittest.Clock, *redislimit.Store, limit.Policy) {
	t.Helper()
	srv := redistest.StartServer(t)
	clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
	s, err := redislimit.New(srv.Client(t), redislimit.Options{Prefix: "renewal:", Clock: clock,
		LocalAllowance: true, AllowanceLease: time.Second, ColdLease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	p := limit.TokenBucket(1000, limit.PerHour(1)).Named("tb")
	ctx := context.Background()
	// The first decision (one-trip) is lent 8 units; the next 6 spend 6;
	// the 8th leaves 1, under a quarter: the renewal starts and stays in
	// flight while the server is paused.
	for i := range 8 {
		if i == 7 {
			if err := srv.Client(t).Do(ctx, "CLIENT", "PAUSE", strconv.Itoa(int(pause.Milliseconds())), "ALL").Err(); err != nil {
				t.Fatal(err)
			}
		}
		if d, err := s.AllowN(ctx, "k", p, 1); err != nil || !d.Allowed {
			t.Fatalf("decision %d: %+v %v", i, d, err)
		}
		clock.Advance(10 * time.Millisecond)
	}
	return srv, clock, s, p
}

// TestColdLeaseDecisionWaitsForRenewal: while a cold lease is being
// renewed early, decisions on the key go on spending what it holds, with
// no call; the one that finds it spent waits for the renewal and spends
// from the new units, rather than taking the one-trip path or being
// refused.
func TestColdLeaseDecisionWaitsForRenewal(t *testing.T) {
	_, _, s, p := renewingCold(t, 500*time.Millisecond)
	ctx := context.Background()
	start := time.Now()
	d, err := s.AllowN(ctx, "k", p, 1)
	took := time.Since(start)
	if err != nil || !d.Allowed || took > 100*time.Millisecond {
		t.Fatalf("%+v %v after %v: want the lease's last unit spent at once", d, err, took)
	}
	start = time.Now()
	d, err = s.AllowN(ctx, "k", p, 1)
	took = time.Since(start)
	st := s.AllowanceStats()
	if err != nil || !d.Allowed || st.Remote != 1 || st.ColdRenewals != 1 || st.ColdLocal != 9 {
		t.Fatalf("%+v %v, stats %+v: want allowed from the renewed lease, 1 one-trip decision, 1 early renewal, 9 local", d, err, st)
	}
	if took < 100*time.Millisecond {
		t.Fatalf("answered in %v: it did not wait for the renewal (the server was paused for 500ms)", took)
	}
}

// TestColdLeaseCloseDuringRenewal: Close waits for an early renewal in
// flight and gives its new lease back: the state then holds exactly the 8
// decisions made, nothing lent.
func TestColdLeaseCloseDuringRenewal(t *testing.T) {
	srv, clock, s, p := renewingCold(t, 300*time.Millisecond)
	ctx := context.Background()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := s.AllowanceStats(); st.ColdRenewals != 1 || st.ColdLeases != 0 {
		t.Fatalf("stats %+v: want the renewal answered and its lease given back", st)
	}
	plain, err := redislimit.New(srv.Client(t), redislimit.Options{Prefix: "renewal:", Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := plain.AllowN(ctx, "k", p, 0); err != nil || d.Remaining != 1000-8 {
		t.Fatalf("after Close: %+v %v; want %d free", d, err, 1000-8)
	}
}
