package gobatcher

import (
	"context"
	"runtime"
	"testing"
	"time"

	gobatcher "github.com/plasne/go-batcher"

	"github.com/costwise/batcher"
)

// n is the number of operations, and the buffer size, of every run.
const n = 1_000_000

// settle is how long a started batcher is given to take what it will from
// its buffer before its memory is measured.
const settle = 300 * time.Millisecond

// library is one side of the comparison: a batcher made with a buffer of n,
// its operations built beforehand, and a rate limiter that grants nothing.
type library struct {
	name string
	ops  func() []any                   // n operations of cost 1
	make func(capacityZero bool) target // a batcher, not started
}

// target is a batcher as the benchmarks drive it.
type target struct {
	enqueue func(op any) error
	start   func() error
	stop    func()
}

var libraries = []library{
	{
		name: "batcher",
		ops: func() []any {
			w := batcher.NewWatcher(func([]batcher.IOperation) {}).WithMaxBatchSize(100)
			ops := make([]any, n)
			for i := range ops {
				ops[i] = batcher.NewOperation(w, 1, nil, true)
			}
			return ops
		},
		make: func(capacityZero bool) target {
			b := batcher.NewBatcherWithBuffer(n)
			if capacityZero {
				limiter := batcher.NewProvisionedResource(1) // operations of cost 1 are accepted
				limiter.SetCapacity(0)
				b.WithRateLimiter(limiter)
			}
			return target{
				enqueue: func(op any) error { return b.Enqueue(op.(batcher.IOperation)) },
				start:   b.Start,
				stop:    b.Stop,
			}
		},
	},
	{
		name: "go-batcher-v1.8.0",
		ops: func() []any {
			w := gobatcher.NewWatcher(func([]gobatcher.IOperation) {}).WithMaxBatchSize(100)
			ops := make([]any, n)
			for i := range ops {
				ops[i] = gobatcher.NewOperation(w, 1, nil, true)
			}
			return ops
		},
		make: func(capacityZero bool) target {
			b := gobatcher.NewBatcherWithBuffer(n)
			if capacityZero {
				b.WithRateLimiter(zeroCapacity{})
			}
			return target{
				enqueue: func(op any) error { return b.Enqueue(op.(gobatcher.IOperation)) },
				start:   b.Start,
				stop:    b.Stop,
			}
		},
	},
}

// zeroCapacity is a go-batcher RateLimiter that grants nothing and accepts
// operations of cost 1, as a shared resource holding no partition would.
// go-batcher's ProvisionedResource cannot have a capacity below its maximum.
type zeroCapacity struct{}

func (zeroCapacity) Provision(context.Context) error { return nil }
func (zeroCapacity) MaxCapacity() uint32             { return 1 }
func (zeroCapacity) Capacity() uint32                { return 0 }
func (zeroCapacity) GiveMe(uint32)                   {}
func (zeroCapacity) Start(context.Context) error     { return nil }
func (zeroCapacity) Stop()                           {}

// BenchmarkEnqueueBeforeStart enqueues n operations into a batcher that was
// not started: ns and bytes allocated per Enqueue.
func BenchmarkEnqueueBeforeStart(b *testing.B) {
	for _, lib := range libraries {
		b.Run(lib.name, func(b *testing.B) {
			ops := lib.ops()
			for i := 0; i < b.N; i++ {
				t := lib.make(false)
				m := measure(b, t, ops)
				b.ReportMetric(m.ns, "ns/enqueue")
				b.ReportMetric(m.allocated, "B/enqueue")
			}
		})
	}
}

// BenchmarkEnqueueCapacityZero enqueues n operations into a started batcher
// whose rate limiter grants nothing: bytes allocated per Enqueue, and bytes
// of heap the batcher keeps per buffered operation once its loop has taken
// what it will, counted from before the batcher was made.
func BenchmarkEnqueueCapacityZero(b *testing.B) {
	for _, lib := range libraries {
		b.Run(lib.name, func(b *testing.B) {
			ops := lib.ops()
			for i := 0; i < b.N; i++ {
				before := heapAlloc()
				t := lib.make(true)
				if err := t.start(); err != nil {
					b.Fatal(err)
				}
				m := measure(b, t, ops)
				time.Sleep(settle)
				kept := heapAlloc() - before
				t.stop()
				b.ReportMetric(m.ns, "ns/enqueue")
				b.ReportMetric(m.allocated, "B/enqueue")
				b.ReportMetric(float64(kept)/n, "B/buffered-op")
			}
		})
	}
}

type enqueued struct {
	ns, allocated float64 // per Enqueue
}

// measure enqueues ops into t and returns the time and the bytes allocated
// (by any goroutine) per Enqueue.
func measure(b *testing.B, t target, ops []any) enqueued {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()
	for _, op := range ops {
		if err := t.enqueue(op); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	runtime.ReadMemStats(&m1)
	return enqueued{
		ns:        float64(elapsed.Nanoseconds()) / float64(len(ops)),
		allocated: float64(m1.TotalAlloc-m0.TotalAlloc) / float64(len(ops)),
	}
}

// heapAlloc returns the bytes of live heap objects after a collection.
func heapAlloc() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
