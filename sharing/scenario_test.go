package sharing

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/fairness"
)

// The scenarios of issue 3 on the memory store, in fake time: shared
// 20,000, factor 1,000, 20 partitions, leases of 15 s, max interval 500 ms.
var issueConfig = simConfig{shared: 20000, factor: 1000}

func TestSharedRampAlone(t *testing.T) {
	cfg := issueConfig
	cfg.instances, cfg.reserved = 1, 500
	s := newSim(t, cfg)
	s.giveMe(0, 20500)
	s.runFor(0, nil) // the pass GiveMe wakes, at once
	if got := s.held(0); got != 20 {
		t.Fatalf("after the first pass the instance holds %d partitions, want 20", got)
	}
	if got := s.inst[0].r.Capacity(); got != 20500 {
		t.Fatalf("Capacity() = %d, want 20500", got)
	}
	// Alone at full demand it keeps full capacity: sample every 100 ms for
	// three minutes, across many renewals.
	before := s.inst[0].r.Stats()
	for k := 0; k < 1800; k++ {
		s.runFor(100*time.Millisecond, nil)
		if got := s.inst[0].r.Capacity(); got != 20500 {
			t.Fatalf("at %v capacity %d, want 20500", s.clock.Now().Sub(simStart), got)
		}
	}
	after := s.inst[0].r.Stats()
	if n := after.Acquisitions - before.Acquisitions; n != 0 {
		t.Fatalf("%d acquisitions while holding everything, want 0 (leases must be renewed, not re-won)", n)
	}
	// 20 leases renewed every 10 s for 180 s.
	if n := after.Renewals - before.Renewals; n < 340 || n > 380 {
		t.Fatalf("%d renewals in 3 minutes, want about 360", n)
	}
}

func TestSharedFourInstancesConverge(t *testing.T) {
	cfg := issueConfig
	cfg.instances = 4
	s := newSim(t, cfg)
	for i := range s.inst {
		s.giveMe(i, 20000)
	}
	s.runFor(5*time.Second, nil)
	if got := s.heldAll(); !slices.Equal(got, []int{5, 5, 5, 5}) {
		t.Fatalf("after 5 s the instances hold %v, want 5 each", got)
	}
	before := make([]Stats, 4)
	for i, in := range s.inst {
		before[i] = in.r.Stats()
	}
	// For two minutes, 5-s windows of time-averaged capacity.
	for w := 0; w < 24; w++ {
		sum := make([]float64, 4)
		for k := 0; k < 50; k++ {
			s.runFor(100*time.Millisecond, nil)
			total := 0
			for i := range s.inst {
				h := s.held(i)
				sum[i] += float64(h)
				total += h
			}
			if total < 20 {
				t.Fatalf("at %v only %d of 20 partitions in use", s.clock.Now().Sub(simStart), total)
			}
		}
		if j := fairness.Jain(sum); j < 0.99 {
			t.Fatalf("window %d: Jain index %.3f (capacity %v)", w, j, sum)
		}
	}
	for i, in := range s.inst {
		st := in.r.Stats()
		calls := float64(st.StorageCalls-before[i].StorageCalls) / 2
		failed := float64(st.StorageFailures-before[i].StorageFailures) / 2
		t.Logf("instance %d: %.0f storage calls/min, %.0f failed", i, calls, failed)
		if calls > 120 || failed > calls/10 {
			t.Fatalf("instance %d: %.0f storage calls/min with %.0f failed, want at most 120 and under 10%%", i, calls, failed)
		}
	}
}

func TestSharedUnequalDemands(t *testing.T) {
	s := newSim(t, simConfig{instances: 3, shared: 20})
	s.giveMe(0, 2)
	s.giveMe(1, 10)
	s.giveMe(2, 20)
	s.runFor(10*time.Second, nil)
	if got := s.heldAll(); !slices.Equal(got, []int{2, 9, 9}) {
		t.Fatalf("instances hold %v, want the max-min shares [2 9 9]", got)
	}
	// Demand moves: the first now wants everything.
	s.giveMe(0, 20)
	// Off a rotation boundary, where an extra partition is between two
	// instances for a few milliseconds.
	s.runFor(5*time.Second+DefaultRotation/4, nil)
	// 20, 10 and 20 over 20: 6 each, and the two left over go to two of
	// them, which two rotating every DefaultRotation.
	got := s.heldAll()
	sorted := slices.Sorted(slices.Values(got))
	if !slices.Equal(sorted, []int{6, 7, 7}) {
		t.Fatalf("after the first instance wants everything they hold %v, want 6, 7 and 7", got)
	}
}

func TestSharedHandOff(t *testing.T) {
	cfg := issueConfig
	cfg.instances = 2
	s := newSim(t, cfg)
	s.giveMe(0, 20000)
	s.runFor(10*time.Second, nil)
	if got := s.heldAll(); !slices.Equal(got, []int{20, 0}) {
		t.Fatalf("before the hand-off the instances hold %v, want [20 0]", got)
	}
	s.giveMe(0, 0)
	s.giveMe(1, 20000)
	start := s.clock.Now()
	var half, full time.Duration = -1, -1
	for full < 0 && s.clock.Now().Sub(start) < 5*time.Second {
		s.runFor(10*time.Millisecond, nil)
		h := s.held(1)
		if half < 0 && h >= 10 {
			half = s.clock.Now().Sub(start)
		}
		if h == 20 {
			full = s.clock.Now().Sub(start)
		}
	}
	t.Logf("hand-off: 50%% after %v, 100%% after %v", half, full)
	if half < 0 || half > time.Second || full < 0 || full > 2*time.Second {
		t.Fatalf("hand-off took %v to 50%% and %v to 100%%, want at most 1 s and 2 s", half, full)
	}
}

func TestSharedReleasesAboveShare(t *testing.T) {
	s := newSim(t, simConfig{instances: 2, shared: 20, recordEvents: true})
	s.giveMe(0, 20)
	// Off a rotation boundary, where an extra partition is between two
	// instances for a few milliseconds.
	s.runFor(5*time.Second+DefaultRotation/4, nil)
	s.giveMe(1, 20)
	start := s.clock.Now()
	for s.held(0) > 10 {
		s.runFor(50*time.Millisecond, nil)
		if s.clock.Now().Sub(start) > 3*time.Second {
			t.Fatalf("instance 0 still holds %d partitions 3 s after another asked", s.held(0))
		}
	}
	s.runFor(3*time.Second, nil)
	if got := s.heldAll(); !slices.Equal(got, []int{10, 10}) {
		t.Fatalf("instances hold %v, want [10 10]", got)
	}
	released := 0
	for _, e := range s.inst[0].events {
		if strings.HasPrefix(e, ReleasedEvent+":") {
			released++
		}
	}
	if released != 10 {
		t.Fatalf("instance 0 raised %d released events, want 10", released)
	}
}

func TestSharedExpiryMargin(t *testing.T) {
	s := newSim(t, simConfig{instances: 1, shared: 5, reserved: 100, recordEvents: true})
	r := s.inst[0].r
	s.giveMe(0, 103)
	s.runFor(0, nil)
	if got := r.Capacity(); got != 103 {
		t.Fatalf("Capacity() = %d, want 103", got)
	}
	s.runFor(time.Second, nil)
	s.mgr.SetFailure(errors.New("storage unreachable"))
	// The leases were acquired at 0 s: valid until 13 s (15 s - 2 s).
	s.runFor(11999*time.Millisecond, nil)
	if got := r.Capacity(); got != 103 {
		t.Fatalf("at 12.999 s capacity %d, want 103 (renewals failing, leases still valid)", got)
	}
	s.runFor(time.Millisecond, nil)
	if got := r.Capacity(); got != 100 {
		t.Fatalf("at 13 s capacity %d, want the reserved 100", got)
	}
	events := strings.Join(s.inst[0].events, " ")
	lastCapacity := ""
	for _, e := range s.inst[0].events {
		if strings.HasPrefix(e, CapacityEvent+":") {
			lastCapacity = e
		}
	}
	if !strings.Contains(events, ErrorEvent+":0") || lastCapacity != CapacityEvent+":100" {
		t.Fatalf("events %q: want error events and a last capacity event of 100", events)
	}
	s.runFor(7*time.Second, nil)
	if got := r.Stats().Held; got != 0 {
		t.Fatalf("%d leases held after they expired, want 0", got)
	}
	s.mgr.SetFailure(nil)
	s.runFor(5*time.Second, nil)
	if got := r.Capacity(); got != 103 {
		t.Fatalf("after the store came back capacity is %d, want 103", got)
	}
}

func TestSharedBacksOffOnErrors(t *testing.T) {
	s := newSim(t, simConfig{instances: 1, shared: 5})
	r := s.inst[0].r
	s.mgr.SetFailure(errors.New("throttled"))
	s.giveMe(0, 5)
	s.runFor(time.Minute, nil)
	st := r.Stats()
	// Back-off doubles from 500 ms to 2 x maxInterval (1 s), with jitter
	// from half of it: at most ~120 passes a minute and about 80, each
	// failing on its first call.
	if st.StorageCalls > 100 || st.Errors == 0 {
		t.Fatalf("%d storage calls and %d errors in a minute of failures, want errors and at most 100 calls",
			st.StorageCalls, st.Errors)
	}
	s.mgr.SetFailure(nil)
	s.runFor(5*time.Second, nil)
	if got := s.held(0); got != 5 {
		t.Fatalf("after the store recovered the instance holds %d, want 5", got)
	}
}

func TestSharedReprovisionsAfterReset(t *testing.T) {
	s := newSim(t, simConfig{instances: 1, shared: 5, recordEvents: true})
	s.giveMe(0, 5)
	s.runFor(5*time.Second, nil)
	s.loseData()
	s.inst[0].events = nil
	// Until its next snapshot the instance cannot know the store lost its
	// leases; the safety check would flag exactly that, so step the
	// instance's passes by hand here.
	in := s.inst[0]
	for k := 0; ; k++ {
		if k == 100 {
			t.Fatalf("no recovery after 100 passes; events %v", in.events)
		}
		if at := in.nextAt(); at.After(s.clock.Now()) {
			s.clock.Set(at)
		}
		next, ok := in.st.pass(s.ctx)
		in.next, in.idle = next, !ok
		if strings.Contains(strings.Join(in.events, " "), CreatedBlobEvent) && s.held(0) == 5 {
			break
		}
	}
	s.checkSafety()
	s.runFor(5*time.Second, nil)
	if got := s.held(0); got != 5 {
		t.Fatalf("after the store lost everything the instance holds %d, want 5", got)
	}
	events := strings.Join(s.inst[0].events, " ")
	if !strings.Contains(events, CreatedBlobEvent+":4") || !strings.Contains(events, CreatedContainerEvent) {
		t.Fatalf("events %q: want the partitions created again", events)
	}
}

func TestSharedIdleMakesNoCalls(t *testing.T) {
	s := newSim(t, simConfig{instances: 2, shared: 10, reserved: 1000})
	base := s.inst[0].r.Stats().StorageCalls
	s.giveMe(0, 800) // within the reserved capacity
	s.giveMe(1, 5)
	s.runFor(time.Minute, nil)
	if n := s.inst[0].r.Stats().StorageCalls - base; n != 0 || !s.inst[0].idle {
		t.Fatalf("an instance within its reserved capacity made %d storage calls (idle %v), want 0", n, s.inst[0].idle)
	}
	// After needing and no longer needing partitions, it gives them back
	// and goes quiet again.
	s.giveMe(0, 1003)
	s.runFor(2*time.Second, nil)
	if got := s.held(0); got != 3 {
		t.Fatalf("instance holds %d, want 3", got)
	}
	s.giveMe(0, 0)
	s.runFor(0, nil)
	calls := s.inst[0].r.Stats().StorageCalls
	s.runFor(10*time.Minute, nil)
	if n := s.inst[0].r.Stats().StorageCalls - calls; n != 0 || s.held(0) != 0 {
		t.Fatalf("after its demand fell to 0 the instance holds %d and made %d calls, want 0 and 0", s.held(0), n)
	}
	snap, _ := s.mgr.Snapshot(s.ctx, 10)
	if _, ok := snap.Demands[s.inst[0].r.owner]; ok {
		t.Fatal("the idle instance's demand is still published")
	}
}

func TestSharedNeverDoubleCounts(t *testing.T) {
	s := newSim(t, simConfig{instances: 3, shared: 12})
	rng := rand.New(rand.NewPCG(7, 7))
	// Ten minutes of random demand; the safety check runs after every pass.
	for step := 0; step < 200; step++ {
		s.giveMe(rng.IntN(3), uint32(rng.IntN(14)))
		if step%40 == 20 {
			// A stalled process: no pass for 20 s while others want more.
			s.inst[0].stall = s.clock.Now().Add(20 * time.Second)
		}
		s.runFor(time.Duration(rng.IntN(6000))*time.Millisecond, func() {
			for i, in := range s.inst {
				if got, want := in.r.Capacity(), uint32(s.held(i)); got != want {
					t.Fatalf("instance %d: Capacity() %d but %d valid leases", i, got, want)
				}
			}
		})
	}
}

func TestSharedSetSharedCapacity(t *testing.T) {
	s := newSim(t, simConfig{instances: 1, shared: 10, recordEvents: true})
	r := s.inst[0].r
	s.giveMe(0, 100)
	s.runFor(time.Second, nil)
	if got := r.Capacity(); got != 10 {
		t.Fatalf("Capacity() = %d, want 10", got)
	}
	if err := r.SetSharedCapacity(20); err != nil {
		t.Fatal(err)
	}
	s.wake(0)
	s.runFor(time.Second, nil)
	if got, max := r.Capacity(), r.MaxCapacity(); got != 20 || max != 20 {
		t.Fatalf("after growing: Capacity() = %d, MaxCapacity() = %d, want 20 and 20", got, max)
	}
	if err := r.SetSharedCapacity(4); err != nil {
		t.Fatal(err)
	}
	s.wake(0)
	s.runFor(time.Second, nil)
	if got := r.Capacity(); got != 4 {
		t.Fatalf("after shrinking: Capacity() = %d, want 4", got)
	}
	if !strings.Contains(strings.Join(s.inst[0].events, " "), CreatedBlobEvent+":19") {
		t.Fatal("no created-blob event for the partitions added")
	}
	var undefined UndefinedSharedCapacityError
	if err := r.SetSharedCapacity(0); !errors.As(err, &undefined) {
		t.Fatalf("SetSharedCapacity(0) = %v, want UndefinedSharedCapacityError", err)
	}
	var out PartitionsOutOfRangeError
	if err := r.SetSharedCapacity(501); !errors.As(err, &out) || out.PartitionCount != 501 {
		t.Fatalf("SetSharedCapacity(501) = %v, want PartitionsOutOfRangeError", err)
	}
	if got := r.MaxCapacity(); got != 4 {
		t.Fatalf("a rejected SetSharedCapacity changed MaxCapacity to %d", got)
	}
}

func TestSharedDampsFlappingDemand(t *testing.T) {
	s := newSim(t, simConfig{instances: 1, shared: 20})
	r := s.inst[0].r
	s.giveMe(0, 7)
	s.runFor(5*time.Second, nil)
	before := r.Stats()
	// A Batcher's target moving every 100 ms between 6 and 7 partitions.
	for k := 0; k < 600; k++ {
		s.giveMe(0, uint32(6+k%2))
		s.runFor(100*time.Millisecond, nil)
	}
	after := r.Stats()
	calls := after.StorageCalls - before.StorageCalls
	if n := after.Releases - before.Releases; n != 0 || calls > 120 {
		t.Fatalf("a flapping demand caused %d releases and %d storage calls in a minute, want 0 and at most 120", n, calls)
	}
	// A lasting fall takes effect within 2 x maxInterval.
	s.giveMe(0, 3)
	start := s.clock.Now()
	for s.held(0) != 3 {
		s.runFor(10*time.Millisecond, nil)
		if d := s.clock.Now().Sub(start); d > time.Second {
			t.Fatalf("still holding %d partitions %v after demand fell to 3", s.held(0), d)
		}
	}
	// A fall to zero takes effect at once.
	s.giveMe(0, 0)
	s.runFor(0, nil)
	if got := s.held(0); got != 0 {
		t.Fatalf("holding %d partitions right after demand fell to 0", got)
	}
}

// TestSharedRemainderNeverOvercounted runs three instances with random
// demands over a shared capacity that is not a multiple of the factor, and
// a change of it; the safety check after every pass finds the instances
// never count more than the shared capacity, and a lone instance gets it
// all.
func TestSharedRemainderNeverOvercounted(t *testing.T) {
	s := newSim(t, simConfig{instances: 3, shared: 10500, factor: 1000})
	rng := rand.New(rand.NewPCG(11, 5))
	for step := 0; step < 120; step++ {
		s.giveMe(rng.IntN(3), uint32(rng.IntN(12000)))
		if step == 60 {
			for i := range s.inst {
				if err := s.inst[i].r.SetSharedCapacity(1001); err != nil {
					t.Fatal(err)
				}
				s.wake(i)
			}
		}
		s.runFor(time.Duration(rng.IntN(4000))*time.Millisecond, nil)
	}
	for i := range s.inst {
		s.giveMe(i, 0)
	}
	s.giveMe(0, 5000)
	s.runFor(20*time.Second, nil)
	if got := s.inst[0].r.Capacity(); got != 1001 {
		t.Fatalf("a lone instance has capacity %d of a shared 1001, want 1001", got)
	}
}

// TestSharedStopHandsOverToASettledInstance: with the defaults, an
// instance that stops while another, settled at its share, still asks for
// everything, hands its partitions over by that instance's next settled
// listing: within 2.5 × the max interval (1.25 s), in every start phase.
// (One that asks after the stop takes them at once: TestSharedRampAlone.)
func TestSharedStopHandsOverToASettledInstance(t *testing.T) {
	bound := time.Duration(DefaultMaxInterval) * time.Millisecond * 5 / 2
	worst := time.Duration(0)
	for _, offset := range []time.Duration{0, 137 * time.Millisecond, 333 * time.Millisecond, 611 * time.Millisecond, 997 * time.Millisecond} {
		cfg := issueConfig
		cfg.instances = 2
		s := newSim(t, cfg)
		s.giveMe(0, 20000)
		s.giveMe(1, 20000)
		s.runFor(10*time.Second+offset, nil)
		if got := s.heldAll(); !slices.Equal(got, []int{10, 10}) {
			t.Fatalf("offset %v: before the stop the instances hold %v, want [10 10]", offset, got)
		}
		// Stop instance 0 as Stop does: its loop's shutdown, then no pass.
		s.inst[0].r.stopped.Store(true)
		s.inst[0].st.shutdown(s.ctx)
		s.inst[0].idle = true
		start := s.clock.Now()
		for s.held(1) < 20 {
			s.runFor(5*time.Millisecond, nil)
			if s.clock.Now().Sub(start) > 3*time.Second {
				t.Fatalf("offset %v: instance 1 holds %d partitions 3 s after the other stopped", offset, s.held(1))
			}
		}
		took := s.clock.Now().Sub(start)
		worst = max(worst, took)
		if took > bound+10*time.Millisecond {
			t.Errorf("offset %v: instance 1 held everything %v after the stop, want within %v", offset, took, bound)
		}
	}
	t.Logf("hand-over after a stop to a settled instance: at most %v", worst)
}
