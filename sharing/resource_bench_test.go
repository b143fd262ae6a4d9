package sharing_test

import (
	"context"
	"testing"
	"time"

	"github.com/costwise/batcher/sharing"
)

// The shared-capacity benchmarks use the configuration of the shared
// capacity issue: 20,000 shared in 20 partitions of 1,000. The scenario
// tool (cmd/batcherbench) measures ramp, fairness and hand-off in real
// time; these measure the cost of single calls.

// BenchmarkSharedResourceCapacity measures Capacity on an instance holding
// every partition, read from all procs at once: a Batcher reads it on every
// release decision, so it must stay cheap and free of contention.
func BenchmarkSharedResourceCapacity(b *testing.B) {
	r := benchHoldingAll(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if r.Capacity() != 20000 {
				b.Error("capacity fell while holding every partition")
				return
			}
		}
	})
}

// BenchmarkSharedResourceGiveMe measures GiveMe with an unchanged target,
// what a Batcher with a steady backlog calls every capacity interval.
func BenchmarkSharedResourceGiveMe(b *testing.B) {
	r := benchHoldingAll(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.GiveMe(20000)
	}
}

// benchHoldingAll starts an instance on the memory store and waits until
// it holds all 20 partitions.
func benchHoldingAll(b *testing.B) *sharing.Resource {
	b.Helper()
	r := sharing.New(sharing.NewMemoryLeaseManager(), 20000).WithFactor(1000)
	ctx := context.Background()
	if err := r.Provision(ctx); err != nil {
		b.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.Stop)
	r.GiveMe(20000)
	deadline := time.Now().Add(10 * time.Second)
	for r.Capacity() != 20000 {
		if time.Now().After(deadline) {
			b.Fatalf("capacity %d after 10 s, want 20000", r.Capacity())
		}
		time.Sleep(time.Millisecond)
	}
	return r
}
