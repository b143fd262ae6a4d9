package batcher_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/costwise/batcher"
	"github.com/google/uuid"
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
func benchHoldingAll(b *testing.B) *batcher.SharedResource {
	b.Helper()
	r := batcher.NewSharedResource(batcher.NewMemoryLeaseManager(), 20000).WithFactor(1000)
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

// BenchmarkLeaseManager measures one call of each LeaseManager method that
// the shared resource makes while running, on the memory store and, when
// BATCHER_AZURITE_URL is set, on Azurite (where each call is an HTTP round
// trip). The Redis manager has its own benchmarks in package redislease.
func BenchmarkLeaseManager(b *testing.B) {
	stores := map[string]func(b *testing.B) batcher.LeaseManager{
		"memory":  func(*testing.B) batcher.LeaseManager { return batcher.NewMemoryLeaseManager() },
		"azurite": benchAzurite,
	}
	for _, name := range []string{"memory", "azurite"} {
		b.Run(name, func(b *testing.B) { benchLeaseCalls(b, stores[name]) })
	}
}

// benchAzurite returns a manager on a fresh container of the Azurite that
// services_start started; without one it skips, or fails under CI=true.
func benchAzurite(b *testing.B) batcher.LeaseManager {
	b.Helper()
	url := os.Getenv("BATCHER_AZURITE_URL")
	if url == "" {
		if os.Getenv("CI") == "true" {
			b.Fatal("BATCHER_AZURITE_URL is not set")
		}
		b.Skip("BATCHER_AZURITE_URL is not set; source scripts/lib/services.sh && services_start")
	}
	m := batcher.NewAzureLeaseManager(azuriteAccount, uniqueContainer()).WithServiceURL(url).WithMasterKey(azuriteKey)
	b.Cleanup(m.CloseIdleConnections)
	return m
}

// benchLeaseCalls provisions 20 partitions with 5 leased and 4 demands
// published, as at full contention between four instances, then measures
// each call.
func benchLeaseCalls(b *testing.B, newManager func(*testing.B) batcher.LeaseManager) {
	ctx := context.Background()
	const lease = 15 * time.Second
	setup := func(b *testing.B) (batcher.LeaseManager, string) {
		m := newManager(b)
		if err := m.Provision(ctx, 20, nil); err != nil {
			b.Fatal(err)
		}
		owner := uuid.NewString()
		for p := 0; p < 5; p++ {
			if err := m.Acquire(ctx, p, owner, lease); err != nil {
				b.Fatal(err)
			}
		}
		for i := 0; i < 4; i++ {
			if err := m.PublishDemand(ctx, uuid.NewString(), 20, time.Minute); err != nil {
				b.Fatal(err)
			}
		}
		return m, owner
	}
	b.Run("Snapshot", func(b *testing.B) {
		m, _ := setup(b)
		benchCalls(b, func() error { _, err := m.Snapshot(ctx, 20); return err })
	})
	b.Run("Renew", func(b *testing.B) {
		m, owner := setup(b)
		benchCalls(b, func() error { return m.Renew(ctx, 0, owner, lease) })
	})
	b.Run("AcquireRelease", func(b *testing.B) {
		m, owner := setup(b)
		benchCalls(b, func() error {
			if err := m.Acquire(ctx, 10, owner, lease); err != nil {
				return err
			}
			return m.Release(ctx, 10, owner)
		})
	})
	b.Run("PublishDemand", func(b *testing.B) {
		m, owner := setup(b)
		benchCalls(b, func() error { return m.PublishDemand(ctx, owner, 5, lease) })
	})
}

// benchCalls times b.N calls of call, failing on the first error.
func benchCalls(b *testing.B, call func() error) {
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := call(); err != nil {
			b.Fatal(err)
		}
	}
}
