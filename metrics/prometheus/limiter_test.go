package prometheus_test

import (
	"context"
	"errors"
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/batchertest"
	"github.com/costwise/batcher/leasetest"
	batcherprom "github.com/costwise/batcher/metrics/prometheus"
)

// startShared returns a started SharedResource on a memory lease manager:
// ten partitions of one unit each plus a reserved capacity of 2, looking at
// the store every 20 ms at most.
func startShared(t *testing.T, mgr batcher.LeaseManager) *batcher.SharedResource {
	t.Helper()
	r := batcher.NewSharedResource(mgr, 10).WithReservedCapacity(2).WithMaxInterval(20).WithOwner("replica-a")
	if err := r.Provision(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

func TestLimiterCollectorPlain(t *testing.T) {
	l := batchertest.NewLimiter(100)
	reg := prom.NewPedanticRegistry()
	c, err := batcherprom.RegisterLimiter(reg, l, batcherprom.Options{ConstLabels: prom.Labels{"name": "cosmos"}})
	if err != nil {
		t.Fatal(err)
	}
	l.SetCapacity(40)
	if got := mustSample(t, reg, "batcher_limiter_capacity", "name", "cosmos"); got != 40 {
		t.Fatalf("capacity %v, want 40", got)
	}
	if got := mustSample(t, reg, "batcher_limiter_max_capacity"); got != 100 {
		t.Fatalf("max capacity %v, want 100", got)
	}
	if _, ok := sample(t, reg, "batcher_limiter_partitions_held"); ok {
		t.Fatal("a plain limiter reports partitions")
	}
	if n := testutil.CollectAndCount(c); n != 2 {
		t.Fatalf("collected %d metrics, want 2", n)
	}
}

// The scenario: a target of 5 with 2 reserved needs 3 partitions; the
// resource leases them, then loses the store, then stops and gives them
// back. The metrics must follow each step.
func TestLimiterCollectorFollowsSharedResource(t *testing.T) {
	mgr := leasetest.NewFaultManager(batcher.NewMemoryLeaseManager())
	r := startShared(t, mgr)
	reg := prom.NewPedanticRegistry()
	if _, err := batcherprom.RegisterLimiter(reg, r, batcherprom.Options{}); err != nil {
		t.Fatal(err)
	}
	m := func(name string) float64 { return mustSample(t, reg, "batcher_limiter_"+name) }
	if m("partitions") != 10 || m("max_capacity") != 12 || m("capacity") != 2 || m("partitions_held") != 0 {
		t.Fatalf("before GiveMe: partitions %v, max %v, capacity %v, held %v",
			m("partitions"), m("max_capacity"), m("capacity"), m("partitions_held"))
	}
	if got := mustSample(t, reg, "batcher_limiter_owner_info", "owner", "replica-a"); got != 1 {
		t.Fatalf("owner_info %v", got)
	}

	r.GiveMe(5)
	eventually(t, "three partitions held", func() bool { return m("partitions_held") == 3 })
	if m("capacity") != 5 || m("partitions_demand") != 3 || m("lease_acquisitions_total") != 3 {
		t.Fatalf("after GiveMe(5): capacity %v, demand %v, acquisitions %v",
			m("capacity"), m("partitions_demand"), m("lease_acquisitions_total"))
	}
	if m("storage_calls_total") < 4 || m("storage_errors_total") != 0 || m("lease_conflicts_total") != 0 {
		t.Fatalf("storage calls %v, errors %v, conflicts %v",
			m("storage_calls_total"), m("storage_errors_total"), m("lease_conflicts_total"))
	}

	mgr.SetFailure(errors.New("store down"))
	eventually(t, "storage errors counted", func() bool {
		return m("storage_errors_total") > 0 && m("errors_total") > 0
	})
	mgr.SetFailure(nil)

	r.Stop()
	if m("partitions_held") != 0 || m("lease_releases_total") < 3 {
		t.Fatalf("after Stop: held %v, releases %v", m("partitions_held"), m("lease_releases_total"))
	}
}

func TestLimiterCollectorLint(t *testing.T) {
	r := startShared(t, batcher.NewMemoryLeaseManager())
	problems, err := testutil.CollectAndLint(batcherprom.NewLimiterCollector(r, batcherprom.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// A batcher and its limiter share one registry without collisions.
func TestBatcherAndLimiterOnOneRegistry(t *testing.T) {
	mgr := batcher.NewMemoryLeaseManager()
	r := startShared(t, mgr)
	b := batcher.New(10)
	b.WithRateLimiter(r)
	reg := prom.NewPedanticRegistry()
	if _, err := batcherprom.Register(reg, b, batcherprom.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := batcherprom.RegisterLimiter(reg, r, batcherprom.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("Gather: %v", err)
	}
	if got := mustSample(t, reg, "batcher_capacity"); got != 2 {
		t.Fatalf("batcher_capacity %v, want the reserved 2", got)
	}
}

// A label value Prometheus refuses fails the scrape with an error; it must
// not panic in the collector.
func TestLimiterCollectorBadOwnerFailsScrape(t *testing.T) {
	r := batcher.NewSharedResource(batcher.NewMemoryLeaseManager(), 10).WithOwner("bad\xff")
	reg := prom.NewRegistry()
	if _, err := batcherprom.RegisterLimiter(reg, r, batcherprom.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err == nil {
		t.Fatal("Gather succeeded with an owner label that is not UTF-8")
	}
}
