package azureblob_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/costwise/batcher/azureblob"
	"github.com/costwise/batcher/lease"
	"github.com/costwise/batcher/sharing"
	"github.com/google/uuid"
)

// BenchmarkLeaseManager measures one call of each LeaseManager method that
// the shared resource makes while running, on the memory store and, when
// BATCHER_AZURITE_URL is set, on Azurite (where each call is an HTTP round
// trip). The Redis manager has its own benchmarks in package redislease.
func BenchmarkLeaseManager(b *testing.B) {
	stores := map[string]func(b *testing.B) lease.Manager{
		"memory":  func(*testing.B) lease.Manager { return sharing.NewMemoryLeaseManager() },
		"azurite": benchAzurite,
	}
	for _, name := range []string{"memory", "azurite"} {
		b.Run(name, func(b *testing.B) { benchLeaseCalls(b, stores[name]) })
	}
}

// benchAzurite returns a manager on a fresh container of the Azurite that
// services_start started; without one it skips, or fails under CI=true.
func benchAzurite(b *testing.B) lease.Manager {
	b.Helper()
	url := os.Getenv("BATCHER_AZURITE_URL")
	if url == "" {
		if os.Getenv("CI") == "true" {
			b.Fatal("BATCHER_AZURITE_URL is not set")
		}
		b.Skip("BATCHER_AZURITE_URL is not set; source scripts/lib/services.sh && services_start")
	}
	m := azureblob.NewLeaseManager(azuriteAccount, uniqueContainer()).WithServiceURL(url).WithMasterKey(azuriteKey)
	b.Cleanup(m.CloseIdleConnections)
	return m
}

// benchLeaseCalls provisions 20 partitions with 5 leased and 4 demands
// published, as at full contention between four instances, then measures
// each call.
func benchLeaseCalls(b *testing.B, newManager func(*testing.B) lease.Manager) {
	ctx := context.Background()
	const leaseFor = 15 * time.Second
	setup := func(b *testing.B) (lease.Manager, string) {
		m := newManager(b)
		if err := m.Provision(ctx, 20, nil); err != nil {
			b.Fatal(err)
		}
		owner := uuid.NewString()
		for p := 0; p < 5; p++ {
			if err := m.Acquire(ctx, p, owner, leaseFor); err != nil {
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
		benchCalls(b, func() error { return m.Renew(ctx, 0, owner, leaseFor) })
	})
	b.Run("AcquireRelease", func(b *testing.B) {
		m, owner := setup(b)
		benchCalls(b, func() error {
			if err := m.Acquire(ctx, 10, owner, leaseFor); err != nil {
				return err
			}
			return m.Release(ctx, 10, owner)
		})
	})
	b.Run("PublishDemand", func(b *testing.B) {
		m, owner := setup(b)
		benchCalls(b, func() error { return m.PublishDemand(ctx, owner, 5, leaseFor) })
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
