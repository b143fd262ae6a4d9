package redislimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/limit/redislimit"
	"go.uber.org/goleak"
)

// TestCloseBoundedByItsContext: Close returns by its context's deadline on
// a frozen server, with go-redis's default client options, while its
// background waits on the server: a hot allowance's renewal (bounded by
// itself at the lease, 10 s here), a cold lease's early renewal and an
// answer awaited for a caller that left (each bounded at half the lease,
// 5 s). What Close could not give back is left to end in Redis; no
// goroutine of the store outlives it once the server answers again.
// Batched, and sent alone.
func TestCloseBoundedByItsContext(t *testing.T) {
	const (
		lease   = 10 * time.Second
		closeIn = 300 * time.Millisecond
	)
	for _, maxBatch := range []int{0, 1} {
		name := "batched"
		if maxBatch == 1 {
			name = "alone"
		}
		t.Run(name, func(t *testing.T) {
			before := goleak.IgnoreCurrent()
			srv, c := frozen(t)
			clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
			s, err := redislimit.New(c, redislimit.Options{Prefix: "cb:", LocalAllowance: true, Clock: clock,
				AllowanceLease: lease, ColdLease: time.Minute, MaxBatch: maxBatch})
			if err != nil {
				t.Fatal(err)
			}
			p := limit.TokenBucket(100_000, limit.PerHour(1)).Named("tb")
			decide := func(key string, d time.Duration) error {
				ctx, cancel := context.WithTimeout(context.Background(), d)
				defer cancel()
				_, err := s.AllowN(ctx, key, p, 1)
				return err
			}
			makeHot(t, s, "hot", p)
			if err := decide("hot", time.Second); err != nil { // takes the allowance
				t.Fatal(err)
			}
			if held := s.HeldUnitsForTest(); held == 0 {
				t.Fatal("no allowance taken")
			}
			if err := decide("cold", time.Second); err != nil { // takes a cold lease of 8
				t.Fatal(err)
			}
			srv.Freeze(t)
			thawed := false
			defer func() {
				if !thawed {
					srv.Thaw(t)
				}
			}()
			// The cold lease spent down to its early renewal.
			for i := 0; s.ColdRenewalsInFlightForTest() == 0; i++ {
				if i == 8 {
					t.Fatal("no early renewal of the cold lease began")
				}
				_ = decide("cold", 50*time.Millisecond)
			}
			// Half the allowance's lease gone, the key still in use: the
			// renewal goroutine renews it.
			clock.Advance(lease / 2)
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			_, err = s.AllowN(ctx, "hot", p, 0)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(5 * time.Second); !s.CallInFlightForTest("hot", p); time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the allowance's renewal did not begin in 5s")
				}
			}
			// A key's first decision, which asks for a cold lease, given
			// up on the wire: its answer is awaited.
			if err := decide("fresh", 100*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("a first decision on a frozen server: %v, want its deadline", err)
			}
			if n := s.ColdRenewalsInFlightForTest(); n < 2 {
				t.Fatalf("%d early renewals and awaited answers in flight, want 2", n)
			}
			ctx, cancel = context.WithTimeout(context.Background(), closeIn)
			defer cancel()
			began := time.Now()
			err = s.Close(ctx)
			took := time.Since(began)
			t.Logf("Close on a frozen server with a %v context: %v after %v", closeIn, err, took)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Close: %v, want its context's deadline", err)
			}
			if took > closeIn+boundMargin {
				t.Errorf("Close took %v, over its context's %v", took, closeIn)
			}
			if err := s.Close(context.Background()); err != nil {
				t.Errorf("a second Close: %v", err)
			}
			srv.Thaw(t)
			thawed = true
			goleak.VerifyNone(t, before)
		})
	}
}
