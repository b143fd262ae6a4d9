package redislimit_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/limit/redislimit"
)

// TestAllowanceSaturatedNoWaitForCallInFlight: on a key saturated at a
// store (its last take came back short), a decision that finds too few
// units while a call for more is in flight is refused at once, with
// RetryAfter at least its cost's refill, rather than after that call's
// round trip (here held up by a paused server until the decision is
// answered, or for 10 s: the time a stalled machine may take is no part
// of the answer).
func TestAllowanceSaturatedNoWaitForCallInFlight(t *testing.T) {
	srv := redistest.StartServer(t)
	clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
	// The paused server answers the call in flight once unpaused; the
	// client waits that long.
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ReadTimeout: time.Minute})
	t.Cleanup(func() { client.Close() })
	s, err := redislimit.New(client, redislimit.Options{Prefix: "inflight:", Clock: clock,
		LocalAllowance: true, AllowanceLease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	p := limit.TokenBucket(100, limit.PerSecond(100)).Named("tb")
	ctx := context.Background()
	// Busy for 3 s of the clock at 200 decisions a second: hot, and the
	// bucket (100 at 100/s) saturated. Each step lets the renewal
	// goroutine finish what it has to do before the clock moves on, so
	// that its calls come at the same times of the clock however busy the
	// machine (left to run behind, it brought a last answer that was not
	// short).
	for range 600 {
		if _, err := s.AllowN(ctx, "k", p, 1); err != nil {
			t.Fatal(err)
		}
		settle(t, s)
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
	// decision's and the last answer short (40 units free at the grid's
	// point at 3.2 s, of the 50 the renewal asks for).
	settle(t, s)
	if short, _, ok := s.GateForTest("k", p); !ok || !short {
		t.Fatalf("before the pause: allowance %v, last answer short %v; want an allowance whose last answer was short (stats %+v)",
			ok, short, s.AllowanceStats())
	}
	t.Logf("before the pause: %+v", s.AllowanceStats())
	// WRITE: the store's scripts wait (they may write), and the pauser's
	// UNPAUSE, which a pause of ALL would hold too, does not.
	pauser := srv.Client(t)
	if err := pauser.Do(ctx, "CLIENT", "PAUSE", "60000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	unpaused := false
	unpause := func() {
		if !unpaused {
			unpaused = true
			if err := pauser.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
				t.Error(err)
			}
		}
	}
	defer unpause()
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
	type answer struct {
		dec limit.Decision
		err error
	}
	second := make(chan answer, 1)
	go func() {
		dec, err := s.AllowN(ctx, "k", p, 100)
		second <- answer{dec, err}
	}()
	var got answer
	select {
	case got = <-second:
	case <-time.After(10 * time.Second):
		unpause()
		got = <-second
		t.Fatalf("the decision waited for the call in flight: answered (%+v, %v) only once the server was unpaused after 10 s", got.dec, got.err)
	}
	select {
	case err := <-first:
		t.Fatalf("the first decision was answered (%v) by a server still paused", err)
	default:
	}
	unpause()
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.dec.Allowed || got.dec.RetryAfter < time.Second {
		t.Fatalf("%+v: want refused, RetryAfter at least its cost's refill (1s)", got.dec)
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
	// the 8th leaves 1, under a quarter: the renewal is queued, begins, and
	// stays in flight while the server is paused.
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
	// The 8th decision queued the renewal; the store's background begins it.
	for deadline := time.Now().Add(5 * time.Second); s.ColdRenewalsQueuedForTest() > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the queued renewal did not begin in 5s")
		}
	}
	if n := s.ColdRenewalsInFlightForTest(); n != 1 {
		t.Fatalf("%d early renewals in flight, want 1", n)
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
