package grpclimit_test

import (
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/middleware/grpclimit"
)

// TestRetryInfoRoundedUpEveryAlgorithm: for every algorithm, a denied call
// carries ResourceExhausted with a RetryInfo of the retry delay rounded up
// to whole seconds, and the same seconds in the retry-after metadata. A
// client that waits it out is admitted, and one that waits a second less
// is still refused: the delay is never early, and not a second longer than
// the store's retry delay rounded up. The denials come at uneven offsets,
// so most retry delays are not whole seconds.
func TestRetryInfoRoundedUpEveryAlgorithm(t *testing.T) {
	policies := limittest.EveryAlgorithm()
	for name, pol := range policies {
		t.Run(name, func(t *testing.T) {
			clk := newFakeClock()
			c := serveHealth(t, grpclimit.Options{
				Policies: []grpclimit.Policy{{Name: name, Limit: pol}},
				Store:    memStore(t, clk), Now: clk.Now,
			})
			denials := 0
			for step := 0; step < 60; step++ {
				md, err := check(t, c)
				if err == nil {
					clk.Advance(time.Duration(137*(step%5)+211) * time.Millisecond)
					continue
				}
				if status.Code(err) != codes.ResourceExhausted {
					t.Fatalf("step %d: %v, want ResourceExhausted", step, err)
				}
				denials++
				delay, ok := grpclimit.RetryDelay(err)
				if !ok || delay < time.Second || delay%time.Second != 0 {
					t.Fatalf("step %d: RetryInfo %v (%v), want whole seconds, at least 1", step, delay, ok)
				}
				if ra := first(md, "retry-after"); ra != strconv.FormatInt(int64(delay/time.Second), 10) {
					t.Errorf("step %d: retry-after metadata %q, RetryInfo %v", step, ra, delay)
				}
				clk.Advance(delay - time.Second)
				if _, err := check(t, c); status.Code(err) != codes.ResourceExhausted {
					t.Fatalf("step %d: admitted a second before RetryInfo %v (%v): the delay is more than the retry rounded up", step, delay, err)
				}
				clk.Advance(time.Second)
				if _, err := check(t, c); err != nil {
					t.Fatalf("step %d: a client that waited RetryInfo %v was refused: %v", step, delay, err)
				}
			}
			if denials < 5 {
				t.Fatalf("only %d denials: the walk tests little", denials)
			}
		})
	}
}
