package redislimit

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/limit"
)

// The batching promises of docs/limits.md, at the options a user gets:
// "while Options.MaxInFlight (default 2) script calls wait for the server,
// the decisions that arrive meanwhile go together in the next one (at most
// Options.MaxBatch, default 256; 1 turns this off)". A frozen server holds
// the calls in flight, so what waits is counted, not timed.

// frozenForBatches starts a server, loads the script through a store with
// default options, and freezes the server. The client waits for a frozen
// server without a read deadline, so that no call in flight gives up before
// the test thaws it.
func frozenForBatches(t *testing.T, opts Options) (*redistest.Server, *Store) {
	t.Helper()
	SkipWithColdLeases(t, "a cold lease decides later calls without a script call")
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: -1})
	t.Cleanup(func() { c.Close() })
	s, err := New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	if _, err := s.AllowN(context.Background(), "warm", batchPolicy, 1); err != nil {
		t.Fatal(err)
	}
	srv.Freeze(t)
	return srv, s
}

var batchPolicy = limit.FixedWindow(10, time.Hour).Named("batch")

// waitFor polls cond until it holds; past 20 s the test fails with what.
func waitFor(t *testing.T, what func() string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s: %s", what())
		}
	}
}

// callers runs AllowN on keys from to to-1 of s, each in its own goroutine,
// and reports every error or denial on errs.
func callers(s *Store, wg *sync.WaitGroup, errs chan<- error, from, to int) {
	for i := from; i < to; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprint("k", i)
			d, err := s.AllowN(context.Background(), key, batchPolicy, 1)
			if err == nil && !d.Allowed {
				err = fmt.Errorf("%s denied: %+v", key, d)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
}

// batchState reads the batcher's queue length and running batches.
func batchState(s *Store) (queued, inFlight int) {
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	return len(s.batch.queue), s.batch.inFlight
}

// TestBatchDefaultsInFlightAndSize: with the zero Options, two script calls
// wait for a frozen server and no third is sent while 600 calls queue
// behind them; once it thaws, the 600 go in batches of at most 256: three
// script calls (256, 256, 88), five in all.
func TestBatchDefaultsInFlightAndSize(t *testing.T) {
	const queued = 600
	srv, s := frozenForBatches(t, Options{})
	base := s.AllowanceStats().Commands
	sent := func() int64 { return s.AllowanceStats().Commands - base }
	var wg sync.WaitGroup
	errs := make(chan error, queued+2)
	defer func() { srv.Thaw(t); wg.Wait() }()

	// One call at a time until the calls in flight are as many as allowed:
	// each of the first two goes alone.
	for i := 0; i < 2; i++ {
		callers(s, &wg, errs, i, i+1)
		waitFor(t, func() string { return fmt.Sprintf("%d script calls sent, want %d", sent(), i+1) },
			func() bool { return sent() == int64(i+1) })
	}
	callers(s, &wg, errs, 2, 2+queued)
	waitFor(t, func() string {
		q, f := batchState(s)
		return fmt.Sprintf("%d calls queued of %d, %d batches in flight, %d script calls sent; want 2 in flight (MaxInFlight default 2)",
			q, queued, f, sent())
	}, func() bool { q, _ := batchState(s); return q == queued })
	if _, f := batchState(s); f != 2 || sent() != 2 {
		t.Fatalf("%d queued: %d batches in flight, %d script calls sent; want 2 and 2 (MaxInFlight default 2)", queued, f, sent())
	}

	srv.Thaw(t)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := sent(); n != 5 {
		t.Fatalf("%d calls queued behind 2 went in %d script calls, want 3 of at most 256 (MaxBatch default 256): %d in all, want 5",
			queued, n-2, n)
	}
}

// TestMaxBatchOneSendsEveryCallAlone: with MaxBatch 1, calls are not held
// back for a batch: eight calls on a frozen server are eight script calls
// waiting for it at once, past the two of MaxInFlight.
func TestMaxBatchOneSendsEveryCallAlone(t *testing.T) {
	const calls = 8 // fewer than go-redis's default pool of 10 per CPU
	srv, s := frozenForBatches(t, Options{MaxBatch: 1})
	base := s.AllowanceStats().Commands
	sent := func() int64 { return s.AllowanceStats().Commands - base }
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	defer func() { srv.Thaw(t); wg.Wait() }()
	callers(s, &wg, errs, 0, calls)
	waitFor(t, func() string {
		return fmt.Sprintf("%d of %d calls sent on a frozen server with MaxBatch 1; want each sent alone at once", sent(), calls)
	}, func() bool { return sent() == calls })
	srv.Thaw(t)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
