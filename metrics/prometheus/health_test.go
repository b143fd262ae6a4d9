package prometheus_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/batchertest"
	batcherprom "github.com/costwise/batcher/metrics/prometheus"
)

func TestStatsHandler(t *testing.T) {
	b, _, _, _ := startInstrumented(t, batcherprom.Options{})
	w := batcher.NewWatcher(func([]batcher.IOperation) {}).WithMaxBatchSize(1)
	if err := b.Enqueue(batcher.NewOperation(w, 3, "payload", true)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "release", func() bool { return b.Stats().Released == 1 })
	shared := startShared(t, batcher.NewMemoryLeaseManager())
	h := batcherprom.StatsHandler(map[string]batcherprom.StatsFunc{
		"orders": batcherprom.BatcherStats(b),
		"cosmos": batcherprom.LimiterStats(shared),
		"plain":  batcherprom.LimiterStats(batchertest.NewLimiter(50)),
	})

	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/debug/batcher", nil))
	if rr.Code != http.StatusOK || rr.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, content type %q", rr.Code, rr.Header().Get("Content-Type"))
	}
	var got struct {
		Orders batcherprom.BatcherView
		Cosmos batcherprom.LimiterView
		Plain  batcherprom.LimiterView
	}
	if err := json.Unmarshal(rr.Body.Bytes(), &got); err != nil {
		t.Fatalf("body %s: %v", rr.Body, err)
	}
	o := got.Orders
	if !o.Running || o.Enqueued != 1 || o.Released != 1 || o.CostReleased != 3 || o.Batches != 1 ||
		o.Rejected["no_operation"] != 0 || len(o.Rejected) != len(batcher.AllRejectReasons()) ||
		o.LastRelease == nil || !o.LastRelease.Equal(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("orders %+v", o)
	}
	if got.Cosmos.Shared == nil || got.Cosmos.Shared.Owner != "replica-a" || got.Cosmos.Shared.Partitions != 10 ||
		got.Cosmos.MaxCapacity != 12 {
		t.Fatalf("cosmos %+v (shared %+v)", got.Cosmos, got.Cosmos.Shared)
	}
	if got.Plain.Shared != nil || got.Plain.Capacity != 50 {
		t.Fatalf("plain %+v", got.Plain)
	}

	rr = httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(http.MethodPost, "/debug/batcher", nil))
	if rr.Code != http.StatusMethodNotAllowed || rr.Header().Get("Allow") != "GET, HEAD" {
		t.Fatalf("POST: status %d, Allow %q", rr.Code, rr.Header().Get("Allow"))
	}
}

// The JSON keys are part of the handler's contract; a renamed field must
// fail here.
func TestStatsHandlerKeys(t *testing.T) {
	h := batcherprom.StatsHandler(map[string]batcherprom.StatsFunc{
		"b": batcherprom.BatcherStats(stubBatcher{batcher.BatcherStats{Enqueued: 2}}),
	})
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/", nil))
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal(rr.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"running", "enqueued", "rejected", "released", "cost_released", "buffered",
		"target", "inflight", "capacity", "max_capacity", "paused", "pauses", "paused_seconds", "audits"} {
		if _, ok := raw["b"][k]; !ok {
			t.Errorf("key %q missing from %s", k, rr.Body)
		}
	}
	if _, ok := raw["b"]["last_release"]; ok {
		t.Errorf("last_release present before any release: %s", rr.Body)
	}
}
