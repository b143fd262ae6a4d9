package batcher

import "testing"

// BenchmarkEnqueueFair is BenchmarkEnqueue under fair release, with the
// operations spread over eight watchers of different weights: Enqueue does
// the same work (the fair queue is the loop's) and allocates nothing.
func BenchmarkEnqueueFair(b *testing.B) {
	bt := New(DefaultBufferSize).WithFairRelease()
	if err := bt.Start(); err != nil {
		b.Fatal(err)
	}
	var ops []IOperation
	for i := 1; i <= 8; i++ {
		w := NewWatcher(func([]IOperation) {}).(*Watcher).WithWeight(uint32(i))
		w.WithMaxBatchSize(100)
		ops = append(ops, NewOperation(w, 1, nil, true))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := bt.Enqueue(ops[i%len(ops)]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	shutdownBench(b, bt)
}
