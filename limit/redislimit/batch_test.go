package redislimit_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/redislimit"
)

// TestBatchedExact has 64 goroutines decide, through one store that lets
// one batch wait for the server at a time, on 4 keys under 3 policies each
// (so batches hold one key several times and keys of several algorithms):
// each key and policy admits exactly its burst, whatever the batches were.
func TestBatchedExact(t *testing.T) {
	const burst, goroutines, calls = 7, 64, 8
	ctx := context.Background()
	c := connect(t)
	s, err := redislimit.New(c, redislimit.Options{Prefix: testPrefix(t, c), MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	policies := []limit.Policy{
		limit.GCRA(limit.PerHour(1), burst).Named("g"),
		limit.TokenBucket(burst, limit.PerHour(1)).Named("t"),
		limit.FixedWindow(burst, time.Hour).Named("f"),
	}
	var admitted [4][3]atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				k, pi := (g+i)%4, (g/4+i)%3
				d, err := s.AllowN(ctx, fmt.Sprint("user-", k), policies[pi], 1)
				if err != nil {
					failed.Add(1)
					continue
				}
				if d.Allowed {
					admitted[k][pi].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d calls failed", failed.Load())
	}
	for k := range admitted {
		for pi, p := range policies {
			if got := admitted[k][pi].Load(); got != burst {
				t.Errorf("user-%d under %s admitted %d, want %d", k, p.Name, got, burst)
			}
		}
	}
}

func TestBatchOptions(t *testing.T) {
	c := connect(t)
	for _, o := range []redislimit.Options{{MaxInFlight: -1}, {MaxBatch: -1}} {
		if _, err := redislimit.New(c, o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// TestBatchedEndedContext checks that a call whose context has ended
// spends nothing.
func TestBatchedEndedContext(t *testing.T) {
	c := connect(t)
	s, err := redislimit.New(c, redislimit.Options{Prefix: testPrefix(t, c)})
	if err != nil {
		t.Fatal(err)
	}
	p := limit.GCRA(limit.PerHour(1), 2).Named("ended")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.AllowN(ctx, "k", p, 1); err != context.Canceled {
		t.Fatalf("ended context: %v, want context.Canceled", err)
	}
	d, err := s.AllowN(context.Background(), "k", p, 0)
	if err != nil || d.Remaining != 2 {
		t.Fatalf("after the ended call: %+v %v, want 2 remaining", d, err)
	}
}
