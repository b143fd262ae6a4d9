package sharing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/clock"
	"github.com/costwise/batcher/lease"

	"github.com/google/uuid"
	"go.uber.org/goleak"
)

// These tests run the real loop goroutine on the system clock with short
// intervals; they poll for its effects with a deadline. The algorithm's
// timing is tested in fake time by the simulation (sharedsim_test.go).

// eventLog records events; it is safe for concurrent use.
type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) listen(event string, val int, _ string, _ interface{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, fmt.Sprintf("%s:%d", event, val))
}

func (l *eventLog) count(event string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.events {
		if strings.HasPrefix(e, event+":") {
			n++
		}
	}
	return n
}

func (l *eventLog) last(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events[max(len(l.events)-n, 0):]...)
}

// eventually polls cond every millisecond until it holds or 5 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// fastResource returns a started Resource on mgr with short
// intervals.
func fastResource(t *testing.T, mgr lease.Manager, shared, reserved uint32) *Resource {
	t.Helper()
	r := New(mgr, shared).WithReservedCapacity(reserved).WithMaxInterval(20)
	if err := r.Provision(context.Background()); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return r
}

func TestSharedProvisionErrors(t *testing.T) {
	ctx := context.Background()
	var noMgr UndefinedLeaseManagerError
	if err := New(nil, 10).Provision(ctx); !errors.As(err, &noMgr) {
		t.Fatalf("Provision without a manager: %v, want UndefinedLeaseManagerError", err)
	}
	var noCap UndefinedSharedCapacityError
	if err := New(NewMemoryLeaseManager(), 0).Provision(ctx); !errors.As(err, &noCap) {
		t.Fatalf("Provision with shared capacity 0: %v, want UndefinedSharedCapacityError", err)
	}
	var out PartitionsOutOfRangeError
	err := New(NewMemoryLeaseManager(), 50001).WithFactor(100).Provision(ctx)
	if !errors.As(err, &out) || out != (PartitionsOutOfRangeError{MaxCapacity: 50001, Factor: 100, PartitionCount: 501}) {
		t.Fatalf("Provision with 501 partitions: %v, want PartitionsOutOfRangeError{50001 100 501}", err)
	}
	if err := New(NewMemoryLeaseManager(), 50000).WithFactor(100).Provision(ctx); err != nil {
		t.Fatalf("Provision with 500 partitions: %v", err)
	}
}

func TestSharedOrderErrors(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := context.Background()
	var order RateLimiterImproperOrderError
	r := New(NewMemoryLeaseManager(), 10)
	if err := r.Start(ctx); !errors.As(err, &order) {
		t.Fatalf("Start before Provision: %v, want RateLimiterImproperOrderError", err)
	}
	if err := r.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Provision(ctx); err != nil {
		t.Fatalf("a second Provision before Start: %v", err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Provision(ctx); !errors.As(err, &order) {
		t.Fatalf("Provision after Start: %v, want RateLimiterImproperOrderError", err)
	}
	if err := r.Start(ctx); !errors.As(err, &order) {
		t.Fatalf("a second Start: %v, want RateLimiterImproperOrderError", err)
	}
	r.Stop()
	r.Stop()
	if err := r.Start(ctx); !errors.As(err, &order) {
		t.Fatalf("Start after Stop: %v, want RateLimiterImproperOrderError", err)
	}
	if err := r.Provision(ctx); !errors.As(err, &order) {
		t.Fatalf("Provision after Stop: %v, want RateLimiterImproperOrderError", err)
	}
	// Stop without Start raises shutdown and leaves nothing running.
	var log eventLog
	r2 := New(NewMemoryLeaseManager(), 10)
	r2.AddListener(log.listen)
	r2.Stop()
	r2.Stop()
	if n := log.count(ShutdownEvent); n != 1 {
		t.Fatalf("%d shutdown events from Stop without Start, twice, want 1", n)
	}
}

func TestSharedStopReleasesAtOnce(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	mgr := NewMemoryLeaseManager()
	var log eventLog
	r := New(mgr, 10).WithReservedCapacity(7).WithMaxInterval(20)
	r.AddListener(log.listen)
	if err := r.Provision(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.GiveMe(17)
	eventually(t, "capacity 17", func() bool { return r.Capacity() == 17 })
	// The capacity event for 17 follows the allocations; wait for it too, so
	// that the fall to 7 at Stop is a change that raises one.
	eventually(t, "capacity event 17", func() bool { return slices.Contains(log.last(1<<20), CapacityEvent+":17") })
	if got := r.MaxCapacity(); got != 17 {
		t.Fatalf("MaxCapacity() = %d, want 17", got)
	}
	r.Stop()
	if got := r.Capacity(); got != 7 {
		t.Fatalf("Capacity() after Stop = %d, want the reserved 7", got)
	}
	// Another instance can take every partition at once.
	for p := 0; p < 10; p++ {
		if err := mgr.Acquire(context.Background(), p, "other", time.Minute); err != nil {
			t.Fatalf("partition %d after Stop: %v", p, err)
		}
	}
	snap, err := mgr.Snapshot(context.Background(), 10)
	if err != nil || len(snap.Demands) != 0 {
		t.Fatalf("demands after Stop: %v (%v), want none", snap.Demands, err)
	}
	r.Stop()
	if n := log.count(ReleasedEvent); n != 10 {
		t.Fatalf("%d released events, want 10", n)
	}
	if n := log.count(AllocatedEvent); n != 10 {
		t.Fatalf("%d allocated events, want 10", n)
	}
	// Capacity falls to the reserved capacity before the leases are
	// released (never counted while another could hold them); shutdown
	// comes last.
	last := log.last(12)
	if want := []string{CapacityEvent + ":7", ReleasedEvent}; last[0] != want[0] || !strings.HasPrefix(last[1], want[1]) ||
		last[11] != ShutdownEvent+":0" {
		t.Fatalf("last events %v, want capacity:7, ten released, shutdown", last)
	}
}

func TestSharedStopHandsOffToAnotherInstance(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	mgr := NewMemoryLeaseManager()
	a := fastResource(t, mgr, 10, 0)
	b := fastResource(t, mgr, 10, 0)
	defer b.Stop()
	a.GiveMe(10)
	b.GiveMe(10)
	eventually(t, "an even split", func() bool { return a.Capacity() == 5 && b.Capacity() == 5 })
	a.Stop()
	eventually(t, "b to take everything", func() bool { return b.Capacity() == 10 })
}

func TestSharedContextCancelEndsLoop(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	mgr := NewMemoryLeaseManager()
	r := New(mgr, 4).WithMaxInterval(20)
	if err := r.Provision(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	r.GiveMe(4)
	eventually(t, "capacity 4", func() bool { return r.Capacity() == 4 })
	cancel()
	eventually(t, "leases released", func() bool {
		snap, err := mgr.Snapshot(context.Background(), 4)
		return err == nil && snap.Partitions[3] == lease.PartitionFree && r.Capacity() == 0
	})
	r.Stop()
}

// hangingManager is a lease.Manager whose calls block until their context
// ends, like an unreachable store.
type hangingManager struct{ *MemoryLeaseManager }

func (h hangingManager) Snapshot(ctx context.Context, count int) (lease.Snapshot, error) {
	<-ctx.Done()
	return lease.Snapshot{}, ctx.Err()
}

func (h hangingManager) PublishDemand(ctx context.Context, owner string, n uint32, ttl time.Duration) error {
	<-ctx.Done()
	return ctx.Err()
}

func TestSharedStopIsBoundedWhenStoreHangs(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var log eventLog
	r := New(hangingManager{NewMemoryLeaseManager()}, 4).WithMaxInterval(20).
		WithLeaseDuration(300 * time.Millisecond)
	r.AddListener(log.listen)
	if err := r.Provision(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.GiveMe(4)
	eventually(t, "an error event", func() bool { return log.count(ErrorEvent) > 0 })
	start := time.Now()
	r.Stop()
	if d := time.Since(start); d > releaseTimeout+time.Second {
		t.Fatalf("Stop took %v with a hanging store", d)
	}
	if got := r.Capacity(); got != 0 {
		t.Fatalf("Capacity() = %d, want 0", got)
	}
}

func TestSharedTargetEventsAndListenerRemoval(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := fastResource(t, NewMemoryLeaseManager(), 100, 10)
	defer r.Stop()
	var log eventLog
	r.AddListener(log.listen)
	// A listener that removes itself must not deadlock.
	var self uuid.UUID
	calls := 0
	self = r.AddListener(func(event string, _ int, _ string, _ interface{}) {
		if event == TargetEvent {
			calls++
			r.RemoveListener(self)
		}
	})
	r.GiveMe(15) // 5 partitions
	r.GiveMe(15)
	r.GiveMe(14) // 4 partitions
	r.GiveMe(5)  // within the reserved capacity
	if calls != 1 {
		t.Fatalf("the self-removing listener ran %d times, want 1", calls)
	}
	log.mu.Lock()
	var targets []string
	for _, e := range log.events {
		if strings.HasPrefix(e, TargetEvent+":") {
			targets = append(targets, e)
		}
	}
	log.mu.Unlock()
	want := []string{"target:5", "target:4", "target:0"}
	if fmt.Sprint(targets) != fmt.Sprint(want) {
		t.Fatalf("target events %v, want %v", targets, want)
	}
}

// TestSharedCapacityNeverExceedsShared checks that a lone instance given a
// shared capacity that is not a multiple of the factor gets exactly that
// capacity, not whole partitions' worth, and that two instances together
// never count more than it.
func TestSharedCapacityNeverExceedsShared(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, tc := range []struct{ shared, factor, reserved uint32 }{
		{1001, 1000, 0}, {10500, 1000, 0}, {10500, 1000, 300}, {7, 3, 0},
	} {
		mgr := NewMemoryLeaseManager()
		r := New(mgr, tc.shared).WithFactor(tc.factor).WithReservedCapacity(tc.reserved).WithMaxInterval(20)
		if err := r.Provision(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := r.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		r.GiveMe(tc.shared + tc.reserved + tc.factor)
		want := tc.shared + tc.reserved
		eventually(t, fmt.Sprintf("capacity %d", want), func() bool { return r.Capacity() == want })
		if max := r.MaxCapacity(); max != want {
			t.Errorf("shared %d factor %d: MaxCapacity %d, want %d", tc.shared, tc.factor, max, want)
		}
		if s := r.Stats(); s.Capacity != want {
			t.Errorf("shared %d factor %d: Stats().Capacity %d, want %d", tc.shared, tc.factor, s.Capacity, want)
		}
		r.Stop()
	}
}

// renewCounter counts the renewal calls that reach a memory store.
type renewCounter struct {
	*MemoryLeaseManager
	renewals int
}

func (c *renewCounter) Renew(ctx context.Context, p int, owner string, d time.Duration) error {
	c.renewals++
	return c.MemoryLeaseManager.Renew(ctx, p, owner, d)
}

func (c *renewCounter) RenewBatch(ctx context.Context, ps []int, owner string, d time.Duration) ([]error, error) {
	c.renewals++
	return c.MemoryLeaseManager.RenewBatch(ctx, ps, owner, d)
}

// TestSharedRenewalsLineUp acquires leases at three different moments; on
// a store that renews in one call, the leases line up on one renewal call
// per round instead of one per group.
func TestSharedRenewalsLineUp(t *testing.T) {
	s := newSim(t, simConfig{instances: 1, shared: 10})
	counter := &renewCounter{MemoryLeaseManager: s.mem}
	s.mgr.Swap(counter)
	for _, want := range []uint32{2, 5, 8} {
		s.giveMe(0, want)
		s.runFor(4*time.Second, nil)
	}
	if got := s.held(0); got != 8 {
		t.Fatalf("holds %d partitions, want 8", got)
	}
	counter.renewals = 0
	s.runFor(time.Minute, nil)
	// A 15-s lease is renewed every 10 s: 6 rounds a minute, and one more
	// while the groups line up.
	if counter.renewals > 7 {
		t.Fatalf("%d renewal calls in a minute for leases acquired at three moments, want at most 7", counter.renewals)
	}
	if got := s.held(0); got != 8 {
		t.Fatalf("holds %d partitions after the minute, want 8", got)
	}
}

// slowLister is a memory store whose listings take a while on the fake
// clock, as an overloaded store's do.
type slowLister struct {
	*MemoryLeaseManager
	clock    *clock.Fake
	took     time.Duration
	listings int
}

func (s *slowLister) Snapshot(ctx context.Context, count int) (lease.Snapshot, error) {
	s.listings++
	s.clock.Advance(s.took)
	return s.MemoryLeaseManager.Snapshot(ctx, count)
}

// TestSharedListsLessWhenListingsAreSlow: listings that take 1 s each come
// at least 4 s apart, so an overloaded store gets fewer; fast listings keep
// the usual pace.
func TestSharedListsLessWhenListingsAreSlow(t *testing.T) {
	for _, c := range []struct {
		took     time.Duration
		min, max int
	}{
		{time.Second, 2, 12},       // two instances, 30 s / (1 s + 4 s) each at most
		{time.Millisecond, 40, 90}, // every 0.75 to 1.25 s each when settled
	} {
		s := newSim(t, simConfig{instances: 2, shared: 10})
		slow := &slowLister{MemoryLeaseManager: s.mem, clock: s.clock}
		s.mgr.Swap(slow)
		s.giveMe(0, 10)
		s.giveMe(1, 10)
		s.runFor(5*time.Second, nil)
		slow.took = c.took
		slow.listings = 0
		s.runFor(30*time.Second, nil)
		if slow.listings < c.min || slow.listings > c.max {
			t.Errorf("listings of %v: %d by two instances in 30 s, want %d to %d", c.took, slow.listings, c.min, c.max)
		}
	}
}

// TestSharedSlowListingsStillHandOver: with listings of 1 s, an instance
// that took every partition before it saw another's demand lists again
// within 2 maxInterval of its last listing's end, not 4 s, and gives half
// back; settled instances keep the slow pace (above).
func TestSharedSlowListingsStillHandOver(t *testing.T) {
	s := newSim(t, simConfig{instances: 2, shared: 10})
	slow := &slowLister{MemoryLeaseManager: s.mem, clock: s.clock, took: time.Second}
	s.mgr.Swap(slow)
	s.giveMe(0, 10)
	s.runFor(100*time.Millisecond, nil)
	if got := s.held(0); got != 10 {
		t.Fatalf("instance 0 holds %d partitions after its first listing, want all 10", got)
	}
	start := s.clock.Now()
	s.giveMe(1, 10)
	var took time.Duration
	s.runFor(20*time.Second, func() {
		if took == 0 && s.held(0) == 5 && s.held(1) == 5 {
			took = s.clock.Now().Sub(start)
		}
	})
	// Instance 0's listing ended at about 1 s; the next one starts within
	// 1 s of that and ends 1 s later; instance 1 lists again at most 2 s
	// after its own (1 s) listing ends. Without the bound instance 0 alone
	// would wait 4 s.
	if took == 0 || took > 4500*time.Millisecond {
		t.Fatalf("the partitions were split 5 and 5 after %v, want within 4.5 s", took)
	}
}
