package gobatcher

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gobatcher "github.com/plasne/go-batcher"

	"github.com/costwise/batcher"
)

// delivery counts the operations the callbacks receive and closes done
// when the last of want has arrived.
type delivery struct {
	got  atomic.Int64
	want int64
	once sync.Once
	done chan struct{}
}

func newDelivery(want int) *delivery {
	return &delivery{want: int64(want), done: make(chan struct{})}
}

func (d *delivery) add(n int) {
	if d.got.Add(int64(n)) == d.want {
		d.once.Do(func() { close(d.done) })
	}
}

// wait waits for the last operation, failing the benchmark after a minute.
func (d *delivery) wait(b *testing.B) {
	select {
	case <-d.done:
	case <-time.After(time.Minute):
		b.Fatalf("delivered %d of %d operations in a minute", d.got.Load(), d.want)
	}
}

// throughputSide pushes n batchable operations of cost 1 through one
// library's batcher, made with NewBatcher (flush interval 100 ms, buffer
// 10,000 on both sides) and, when flush is not zero, WithFlushInterval
// (flush): one producer that builds each operation with NewOperation and
// enqueues it, one watcher with MaxBatchSize 100, a callback that only
// counts, no rate limiter. It returns the time from the first NewOperation
// to the last callback.
type throughputSide func(b *testing.B, n int, flush time.Duration) time.Duration

var throughputSides = []struct {
	name string
	run  throughputSide
}{
	{"batcher", func(b *testing.B, n int, flush time.Duration) time.Duration {
		d := newDelivery(n)
		bt := batcher.NewBatcher()
		if flush > 0 {
			bt.WithFlushInterval(flush)
		}
		w := batcher.NewWatcher(func(ops []batcher.IOperation) { d.add(len(ops)) }).WithMaxBatchSize(100)
		if err := bt.Start(); err != nil {
			b.Fatal(err)
		}
		defer bt.Stop()
		start := time.Now()
		for range n {
			if err := bt.Enqueue(batcher.NewOperation(w, 1, nil, true)); err != nil {
				b.Fatal(err)
			}
		}
		d.wait(b)
		return time.Since(start)
	}},
	{"go-batcher-v1.8.0", func(b *testing.B, n int, flush time.Duration) time.Duration {
		d := newDelivery(n)
		bt := gobatcher.NewBatcher()
		if flush > 0 {
			bt.WithFlushInterval(flush)
		}
		w := gobatcher.NewWatcher(func(ops []gobatcher.IOperation) { d.add(len(ops)) }).WithMaxBatchSize(100)
		if err := bt.Start(); err != nil {
			b.Fatal(err)
		}
		defer bt.Stop()
		start := time.Now()
		for range n {
			if err := bt.Enqueue(gobatcher.NewOperation(w, 1, nil, true)); err != nil {
				b.Fatal(err)
			}
		}
		d.wait(b)
		return time.Since(start)
	}},
}

// BenchmarkThroughput measures both libraries end to end, b.N operations
// from the first NewOperation to the last callback, at their default
// settings (a 100 ms flush interval on both) and at a 1 ms flush interval,
// and reports ops/s. With -count the libraries alternate, so that the load
// of the machine falls on both alike.
func BenchmarkThroughput(b *testing.B) {
	for _, flush := range []struct {
		name string
		d    time.Duration
	}{{"default", 0}, {"flush=1ms", time.Millisecond}} {
		for _, side := range throughputSides {
			b.Run(flush.name+"/"+side.name, func(b *testing.B) {
				b.ReportAllocs()
				elapsed := side.run(b, b.N, flush.d)
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
			})
		}
	}
}
