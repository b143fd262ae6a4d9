package prometheus_test

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
