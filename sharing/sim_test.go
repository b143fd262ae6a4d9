package sharing

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/clock"
	"github.com/costwise/batcher/lease"
	"github.com/costwise/batcher/leasetest"
)

// The simulation drives Resource passes by hand, without the loop
// goroutine: a discrete-event loop on a fake clock runs, at each moment, the
// pass of whichever instance is due next. Instances share one memory lease
// manager, as separate processes share one store. Every run is
// deterministic, and every pass is followed by the safety check that no
// partition is counted by an instance that does not hold it at the store.

var simStart = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// simInstance is one Resource and the loop state its goroutine would
// own.
type simInstance struct {
	r      *Resource
	st     *loop
	next   time.Time // when its next pass is due
	idle   bool      // waiting for GiveMe only
	passes int
	events []string
	stall  time.Time // no pass before then (a stalled process)
}

// sim is a set of instances sharing one store and one fake clock.
type sim struct {
	t     *testing.T
	clock *clock.Fake
	mem   *MemoryLeaseManager     // the store behind mgr, read by the safety check
	mgr   *leasetest.FaultManager // what the instances use
	inst  []*simInstance
	ctx   context.Context
}

// simConfig configures each instance of a simulation.
type simConfig struct {
	instances      int
	shared, factor uint32
	reserved       uint32
	lease          time.Duration
	maxIntervalMS  uint32
	recordEvents   bool
	seed           uint64 // the instances' random streams; 0 is 99
}

func newSim(t *testing.T, cfg simConfig) *sim {
	t.Helper()
	fake := clock.NewFake(simStart)
	s := &sim{t: t, clock: fake, mem: NewMemoryLeaseManager().WithClock(fake), ctx: context.Background()}
	s.mgr = leasetest.NewFaultManager(s.mem)
	for i := 0; i < cfg.instances; i++ {
		s.add(cfg, i)
	}
	return s
}

// add makes instance i, provisions it and puts it in the simulation.
func (s *sim) add(cfg simConfig, i int) *simInstance {
	s.t.Helper()
	return s.addWith(cfg, i, s.mgr)
}

// addWith is add with the instance's calls made through mgr, which wraps
// s.mgr to give one instance faults of its own.
func (s *sim) addWith(cfg simConfig, i int, mgr lease.Manager) *simInstance {
	s.t.Helper()
	if cfg.factor == 0 {
		cfg.factor = 1
	}
	if cfg.lease == 0 {
		cfg.lease = DefaultLeaseDuration
	}
	if cfg.maxIntervalMS == 0 {
		cfg.maxIntervalMS = DefaultMaxInterval
	}
	seed := cfg.seed
	if seed == 0 {
		seed = 99
	}
	rng := rand.New(rand.NewPCG(uint64(i)+1, seed))
	r := New(mgr, cfg.shared).WithFactor(cfg.factor).WithReservedCapacity(cfg.reserved).
		WithLeaseDuration(cfg.lease).WithMaxInterval(cfg.maxIntervalMS).WithClock(s.clock).
		WithRand(rng.Float64).WithOwner(fmt.Sprintf("instance-%d", i))
	in := &simInstance{r: r, st: newLoop(r), next: s.clock.Now()}
	if cfg.recordEvents {
		r.AddListener(func(event string, val int, msg string, _ interface{}) {
			in.events = append(in.events, fmt.Sprintf("%s:%d", event, val))
		})
	}
	if err := r.Provision(s.ctx); err != nil {
		s.t.Fatalf("Provision: %v", err)
	}
	s.inst = append(s.inst, in)
	return in
}

// giveMe calls GiveMe on instance i and, as the wake channel would, makes
// its pass due now when GiveMe woke it.
func (s *sim) giveMe(i int, target uint32) {
	in := s.inst[i]
	in.r.GiveMe(target)
	select {
	case <-in.r.wake:
		in.next, in.idle = s.clock.Now(), false
	default:
	}
}

// wake makes instance i's pass due now, as SetSharedCapacity would.
func (s *sim) wake(i int) {
	in := s.inst[i]
	select {
	case <-in.r.wake:
	default:
	}
	in.next, in.idle = s.clock.Now(), false
}

// due returns the instance whose pass comes first, or nil when all are idle.
func (s *sim) due() *simInstance {
	var first *simInstance
	for _, in := range s.inst {
		if in.idle {
			continue
		}
		at := in.next
		if in.stall.After(at) {
			at = in.stall
		}
		if first == nil || at.Before(first.nextAt()) {
			first = in
		}
	}
	return first
}

func (in *simInstance) nextAt() time.Time {
	if in.stall.After(in.next) {
		return in.stall
	}
	return in.next
}

// runFor runs passes for d of fake time, calling each (when not nil) after
// every pass, and leaves the clock at the end of d.
func (s *sim) runFor(d time.Duration, each func()) {
	s.t.Helper()
	end := s.clock.Now().Add(d)
	for {
		in := s.due()
		if in == nil || in.nextAt().After(end) {
			break
		}
		if at := in.nextAt(); at.After(s.clock.Now()) {
			s.clock.Set(at)
		}
		s.pass(in)
		if each != nil {
			each()
		}
	}
	s.clock.Set(end)
	s.checkSafety()
}

// pass runs one pass of in, as its loop goroutine would.
func (s *sim) pass(in *simInstance) {
	select {
	case <-in.r.wake:
	default:
	}
	next, ok := in.st.pass(s.ctx)
	in.passes++
	in.next, in.idle = next, !ok
	s.checkSafety()
}

// checkSafety fails the test when an instance counts a partition that the
// store does not show leased to it, unexpired, at this moment, or when the
// instances' shared capacities add up to more than the shared capacity.
func (s *sim) checkSafety() {
	s.t.Helper()
	now := s.clock.Now()
	s.mem.mu.Lock()
	defer s.mem.mu.Unlock()
	counted := map[int]string{}
	var total uint64
	for _, in := range s.inst {
		total += uint64(in.r.capacityAt(now) - in.r.reserved.Load())
		if shared := uint64(in.r.shared.Load()); total > shared {
			s.t.Fatalf("at %v the instances count %d of a shared capacity of %d", now.Sub(simStart), total, shared)
		}
		for p, l := range in.st.table {
			if !now.Before(l.validUntil) {
				continue
			}
			if other, dup := counted[p]; dup {
				s.t.Fatalf("at %v partition %d counted by %s and %s", now.Sub(simStart), p, other, in.r.owner)
			}
			counted[p] = in.r.owner
			lease, ok := s.mem.partitions[p]
			if !ok || lease.owner != in.r.owner || !now.Before(lease.expires) {
				s.t.Fatalf("at %v %s counts partition %d but the store has %+v", now.Sub(simStart), in.r.owner, p, lease)
			}
		}
	}
}

// loseData imitates a store that lost its data: the instances' calls go to
// an empty store from now on.
func (s *sim) loseData() {
	s.mem = NewMemoryLeaseManager().WithClock(s.clock)
	s.mgr.Swap(s.mem)
}

// held returns how many partitions instance i counts now.
func (s *sim) held(i int) int {
	n, _ := tally(s.inst[i].st.table.view(), s.clock.Now(), math.MaxUint32, 1)
	return n
}

// heldAll returns how many partitions each instance counts now.
func (s *sim) heldAll() []int {
	out := make([]int, len(s.inst))
	for i := range s.inst {
		out[i] = s.held(i)
	}
	return out
}
