package batcher_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/batchertest"
)

// ExampleBatcher_WithFairRelease shows two watchers sharing the capacity by
// weight: "bulk" (weight 1) enqueued its backlog first, "orders" (weight 2)
// after it, and the first interval's worth of capacity goes two to one in
// favour of orders instead of all to bulk. The clock is a fake one, so only
// the credit of the first interval is spent.
func ExampleBatcher_WithFairRelease() {
	clock := batchertest.NewFakeClock(time.Time{})
	b := batcher.New(1000).WithClock(clock).WithFairRelease()
	b.WithRateLimiter(batcher.NewProvisionedResource(1000)).WithEmitBatch() // 100 cost per 100 ms
	rec := batchertest.NewRecorder()
	b.AddListener(rec.Listener())

	noop := func([]batcher.IOperation) {}
	bulk := batcher.NewWatcher(noop).(*batcher.Watcher).WithName("bulk")
	orders := batcher.NewWatcher(noop).(*batcher.Watcher).WithName("orders").WithWeight(2)
	for i := 0; i < 30; i++ {
		_ = b.Enqueue(batcher.NewOperation(bulk, 10, i, false))
	}
	for i := 0; i < 30; i++ {
		_ = b.Enqueue(batcher.NewOperation(orders, 10, i, false))
	}
	if err := b.Start(); err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	events, _ := rec.WaitFor(ctx, batcher.BatchEvent, 10)
	b.Stop()
	var order []string
	for _, e := range events {
		w := e.Metadata.([]batcher.IOperation)[0].Watcher().(*batcher.Watcher)
		order = append(order, w.Name())
	}
	fmt.Println(strings.Join(order, " "))
	fmt.Println("released per name:", b.Stats().Watchers["bulk"].Operations, b.Stats().Watchers["orders"].Operations)
	// Output:
	// bulk orders orders bulk orders orders bulk orders orders bulk
	// released per name: 4 6
}

// ExampleOperation_SetActualCost shows a callback reporting what each
// operation really cost (here twice the estimate, as a datastore's
// response would tell): the credit is charged the difference, and the
// target the batcher asks capacity for follows the actual costs.
func ExampleOperation_SetActualCost() {
	b := batcher.New(1000)
	b.WithRateLimiter(batcher.NewProvisionedResource(10000))
	w := batcher.NewWatcher(func(batch []batcher.IOperation) {
		for _, op := range batch {
			// Write op to the datastore; its response carries the charge.
			charge := 2 * op.Cost()
			op.(*batcher.Operation).SetActualCost(charge)
		}
	}).WithMaxBatchSize(10)
	if err := b.Start(); err != nil {
		panic(err)
	}
	for i := 0; i < 20; i++ {
		_ = b.Enqueue(batcher.NewOperation(w, 5, i, true))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		panic(err)
	}
	fmt.Printf("actual ÷ estimated cost: %.1f\n", b.Stats().CostRatio)
	// Output:
	// actual ÷ estimated cost: 2.0
}
