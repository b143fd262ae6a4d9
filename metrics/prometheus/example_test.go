package prometheus_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/costwise/batcher"
	batcherprom "github.com/costwise/batcher/metrics/prometheus"
)

// Register a batcher's collector before Start, run some work, and read two
// of its counters back from the registry, as a scrape would.
func ExampleRegister() {
	reg := prometheus.NewRegistry()
	b := batcher.New(100)
	opts := batcherprom.Options{ConstLabels: prometheus.Labels{"name": "orders"}}
	if _, err := batcherprom.Register(reg, b, opts); err != nil {
		fmt.Println(err)
		return
	}
	if err := b.Start(); err != nil {
		fmt.Println(err)
		return
	}
	w := batcher.NewWatcher(func([]batcher.IOperation) {}).WithMaxBatchSize(10)
	for i := 0; i < 3; i++ {
		_ = b.Enqueue(batcher.NewOperation(w, 5, i, true))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = b.Shutdown(ctx)

	families, _ := reg.Gather()
	for _, f := range families {
		switch f.GetName() {
		case "batcher_operations_released_total", "batcher_cost_released_total":
			m := f.GetMetric()[0]
			fmt.Printf("%s{name=%q} %v\n", f.GetName(), m.GetLabel()[0].GetValue(), m.GetCounter().GetValue())
		}
	}
	// Output:
	// batcher_cost_released_total{name="orders"} 15
	// batcher_operations_released_total{name="orders"} 3
}

// The set-up of the package documentation, metrics/README.md and
// docs/batcher.md, as written there, so that it keeps compiling.
func Example_setup() {
	rl := batcher.NewProvisionedResource(1000)
	mux := http.NewServeMux()

	reg := prometheus.NewRegistry()
	b := batcher.New(batcher.DefaultBufferSize) // a *Batcher: WithRateLimiter returns the IBatcher interface
	b.WithRateLimiter(rl)
	opts := batcherprom.Options{ConstLabels: prometheus.Labels{"name": "orders"}}
	// Register also makes the collector b's BatchObserver: call it before b.Start.
	if _, err := batcherprom.Register(reg, b, opts); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := batcherprom.RegisterLimiter(reg, rl, opts); err != nil {
		fmt.Println(err)
		return
	}
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/debug/batcher", batcherprom.StatsHandler(map[string]batcherprom.StatsFunc{
		"orders": batcherprom.BatcherStats(b),
		"cosmos": batcherprom.LimiterStats(rl),
	}))
	n, _ := testutil.GatherAndCount(reg, "batcher_capacity")
	fmt.Println("batcher_capacity series:", n)
	// Output:
	// batcher_capacity series: 1
}
