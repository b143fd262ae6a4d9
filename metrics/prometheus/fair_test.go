package prometheus_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/costwise/batcher"
	batcherprom "github.com/costwise/batcher/metrics/prometheus"
)

// Under fair release the collector exports the releases per priority class
// and per watcher name; the names are bounded, so a name per request cannot
// grow the label set without limit.
func TestFairReleaseMetrics(t *testing.T) {
	b := batcher.New(10_000).WithFairRelease()
	reg := prom.NewPedanticRegistry()
	if _, err := batcherprom.Register(reg, b, batcherprom.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	noop := func([]batcher.IOperation) {}
	enqueue := func(w batcher.IWatcher, n int, cost uint32) {
		for i := 0; i < n; i++ {
			if err := b.Enqueue(batcher.NewOperation(w, cost, i, false)); err != nil {
				t.Fatal(err)
			}
		}
	}
	enqueue(batcher.NewWatcher(noop).(*batcher.Watcher).WithName("orders"), 3, 2)
	enqueue(batcher.NewWatcher(noop).(*batcher.Watcher).WithName("orders"), 1, 2) // same name: adds up
	enqueue(batcher.NewWatcher(noop).(*batcher.Watcher).WithName("reports").WithPriority(batcher.PriorityLow), 2, 5)
	enqueue(batcher.NewWatcher(noop), 1, 7) // unnamed: only in its class
	for i := 0; i < batcher.MaxWatcherNames+20; i++ {
		enqueue(batcher.NewWatcher(noop).(*batcher.Watcher).WithName(fmt.Sprint("tenant-", i)), 1, 1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	const want = `
# HELP batcher_priority_cost_released_total Cost of the operations handed to watchers, by priority class; only under fair release.
# TYPE batcher_priority_cost_released_total counter
batcher_priority_cost_released_total{priority="high"} 135
batcher_priority_cost_released_total{priority="low"} 10
# HELP batcher_priority_operations_released_total Operations handed to watchers, by priority class; only under fair release.
# TYPE batcher_priority_operations_released_total counter
batcher_priority_operations_released_total{priority="high"} 125
batcher_priority_operations_released_total{priority="low"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"batcher_priority_operations_released_total", "batcher_priority_cost_released_total"); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]float64{"orders": 8, "reports": 10, "tenant-0": 1, "other": 22} {
		if got := mustSample(t, reg, "batcher_watcher_cost_released_total", "watcher", name); got != v {
			t.Errorf("watcher_cost_released_total{watcher=%q} = %v, want %v", name, got, v)
		}
	}
	n, err := testutil.GatherAndCount(reg, "batcher_watcher_operations_released_total")
	if err != nil || n != batcher.MaxWatcherNames+1 {
		t.Fatalf("%d watcher series (%v), want %d: the names and \"other\"", n, err, batcher.MaxWatcherNames+1)
	}
	if v := mustSample(t, reg, "batcher_cost_ratio"); v != 1 {
		t.Fatalf("cost_ratio %v with no actual costs reported, want 1", v)
	}
}

// Without fair release there are no per-class or per-watcher series.
func TestNoFairMetricsByDefault(t *testing.T) {
	b := batcher.New(10)
	reg := prom.NewPedanticRegistry()
	if _, err := batcherprom.Register(reg, b, batcherprom.Options{}); err != nil {
		t.Fatal(err)
	}
	n, err := testutil.GatherAndCount(reg, "batcher_priority_operations_released_total", "batcher_watcher_operations_released_total")
	if err != nil || n != 0 {
		t.Fatalf("%d fair-release series without fair release (%v)", n, err)
	}
}
