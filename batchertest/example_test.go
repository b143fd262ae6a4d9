package batchertest_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/batchertest"
)

// ingestHandler is the kind of code a user writes: it enqueues one operation
// per record and answers 202 once all are accepted.
func ingestHandler(b batcher.IBatcher, written *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Query().Get("records"))
		if err != nil {
			http.Error(w, "records must be a number", http.StatusBadRequest)
			return
		}
		watcher := batcher.NewWatcher(func(batch []batcher.IOperation) {
			written.Add(int64(len(batch))) // the datastore write goes here
		}).WithMaxBatchSize(10)
		for i := 0; i < n; i++ {
			if err := b.EnqueueContext(r.Context(), batcher.NewOperation(watcher, 5, i, true)); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		w.WriteHeader(http.StatusAccepted)
	})
}

// Example tests an HTTP handler built on a Batcher without sleeping: a fake
// clock decides when time passes, a scripted limiter decides the capacity,
// and a recorder shows what the batcher did.
func Example() {
	clock := batchertest.NewFakeClock(time.Time{})
	limiter := batchertest.NewLimiter(1000) // 1,000 cost per second
	b := batcher.New(1000).WithClock(clock).WithEmitBatch()
	b.WithRateLimiter(limiter)
	rec := batchertest.NewRecorder()
	b.AddListener(rec.Listener())
	if err := b.Start(); err != nil {
		panic(err)
	}
	defer b.Stop()

	var written atomic.Int64
	srv := httptest.NewServer(ingestHandler(b, &written))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"?records=25", "text/plain", nil)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("status:", resp.StatusCode)

	// A new batcher starts with one flush interval of credit (100): the two
	// full batches of 10 records (cost 50 each) go at once, without any time
	// passing; the last 5 records wait for the flush interval.
	waitFor := func(n int64) {
		deadline := time.Now().Add(10 * time.Second)
		for written.Load() < n && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond) // callbacks run on their own goroutines
		}
	}
	waitFor(20)
	fmt.Println("written before time moved:", written.Load())
	clock.Advance(100 * time.Millisecond)
	waitFor(25)
	fmt.Println("written after one flush interval:", written.Load(), "in", rec.Count(batcher.BatchEvent), "batches")
	for deadline := time.Now().Add(10 * time.Second); (b.NeedsCapacity() > 0 || len(limiter.Targets()) == 0) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	fmt.Println("outstanding cost:", b.NeedsCapacity(), "limiter asked:", len(limiter.Targets()) > 0)
	// Output:
	// status: 202
	// written before time moved: 20
	// written after one flush interval: 25 in 3 batches
	// outstanding cost: 0 limiter asked: true
}
