package redislease_test

import (
	"context"
	"testing"
	"time"

	"github.com/costwise/batcher/redislease"
)

// BenchmarkSnapshot measures the one-script read of 20 partitions and a
// few demand records that a SharedResource makes every listing.
func BenchmarkSnapshot(b *testing.B) {
	c := sharedClient(b)
	m := redislease.New(c, testPrefix(b, c))
	ctx := context.Background()
	if err := m.Provision(ctx, 20, nil); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if err := m.PublishDemand(ctx, string(rune('a'+i)), 5, time.Minute); err != nil {
			b.Fatal(err)
		}
		if err := m.Acquire(ctx, i, "a", time.Minute); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := m.Snapshot(ctx, 20); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireRelease measures a lease won and given back: two
// scripts, two round trips.
func BenchmarkAcquireRelease(b *testing.B) {
	c := sharedClient(b)
	m := redislease.New(c, testPrefix(b, c))
	ctx := context.Background()
	if err := m.Provision(ctx, 1, nil); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := m.Acquire(ctx, 0, "a", time.Minute); err != nil {
			b.Fatal(err)
		}
		if err := m.Release(ctx, 0, "a"); err != nil {
			b.Fatal(err)
		}
	}
}
