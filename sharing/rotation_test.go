package sharing

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestFairSharesRotate checks that the remainder of an uneven split moves
// on by one owner each epoch, so that over A epochs every one of A owners gets
// exactly R extra partitions, whatever the epoch the count starts at; and
// that a split already nearly fair (4 and 3 partitions among 128 owners:
// Jain 0.9945) stays with the same owners.
func TestFairSharesRotate(t *testing.T) {
	for _, c := range []struct {
		partitions, owners int
		rotates            bool
	}{{20, 128, true}, {100, 64, true}, {20, 16, true}, {500, 128, false}, {3, 7, true}, {500, 16, false}, {100, 99, false}, {20, 21, true}} {
		demands := map[string]uint32{}
		for i := range c.owners {
			demands[fmt.Sprintf("owner-%03d", i)] = uint32(c.partitions)
		}
		base := c.partitions / c.owners
		rem := c.partitions % c.owners
		extra := map[string]int{}
		for e := uint64(1000); e < 1000+uint64(c.owners); e++ {
			shares, rotating := fairShares(c.partitions, demands, e)
			if rotating != c.rotates {
				t.Fatalf("%d over %d: rotating %v, want %v", c.partitions, c.owners, rotating, c.rotates)
			}
			total := 0
			for o, n := range shares {
				total += n
				if n != base && n != base+1 {
					t.Fatalf("%d over %d, epoch %d: %s gets %d, want %d or %d", c.partitions, c.owners, e, o, n, base, base+1)
				}
				extra[o] += n - base
			}
			if total != c.partitions {
				t.Fatalf("%d over %d, epoch %d: shares add up to %d", c.partitions, c.owners, e, total)
			}
		}
		for o := range demands {
			want := rem
			if !c.rotates {
				// The same owners every epoch.
				want = extra[o] / c.owners * c.owners
				if extra[o] != 0 && extra[o] != c.owners {
					t.Fatalf("%d over %d without rotation: %s got the extra partition in %d of %d epochs, want all or none", c.partitions, c.owners, o, extra[o], c.owners)
				}
			}
			if extra[o] != want {
				t.Fatalf("%d over %d: %s got the extra partition %d times in %d epochs, want %d", c.partitions, c.owners, o, extra[o], c.owners, want)
			}
		}
	}
}

// TestGainRangeDisjoint checks that the owners that gain in a rotation get
// disjoint places that cover exactly the partitions gained.
func TestGainRangeDisjoint(t *testing.T) {
	demands := map[string]uint32{}
	for i := range 10 {
		demands[fmt.Sprintf("o%d", i)] = 4
	}
	before, _ := fairShares(7, demands, 5)
	after, _ := fairShares(7, demands, 6)
	taken := map[int]string{}
	gained := 0
	for o := range demands {
		lo, hi := gainRange(o, before, after)
		if hi-lo != max(after[o]-before[o], 0) {
			t.Fatalf("%s: places [%d, %d) for a gain of %d", o, lo, hi, after[o]-before[o])
		}
		for p := lo; p < hi; p++ {
			if other, dup := taken[p]; dup {
				t.Fatalf("place %d given to %s and %s", p, other, o)
			}
			taken[p] = o
		}
		gained += hi - lo
	}
	if gained == 0 || len(taken) != gained {
		t.Fatalf("%d places for %d partitions gained", len(taken), gained)
	}
}

// rotationRun is what measureRotation saw.
type rotationRun struct {
	utilisation float64   // held partition-seconds over partitions x time
	jain        []float64 // per window, of each instance's partition-seconds
	callsPerMin float64   // storage calls per instance per minute, the most of any instance
}

// measureRotation runs instances that all want every partition, lets them
// settle for 10 s, then measures for windows x window of fake time,
// integrating each instance's held partitions every step. Every pass is
// followed by the simulation's safety check.
func measureRotation(t *testing.T, instances int, partitions uint32, window time.Duration, windows int) rotationRun {
	t.Helper()
	s := newSim(t, simConfig{instances: instances, shared: partitions})
	for i := range s.inst {
		s.giveMe(i, partitions)
	}
	s.runFor(10*time.Second, nil)
	calls0 := make([]uint64, instances)
	for i, in := range s.inst {
		calls0[i] = in.r.Stats().StorageCalls
	}
	const step = 10 * time.Millisecond
	var run rotationRun
	var held, total float64
	for range windows {
		secs := make([]float64, instances)
		for elapsed := time.Duration(0); elapsed < window; elapsed += step {
			s.runFor(step, nil)
			for i, n := range s.heldAll() {
				secs[i] += float64(n) * step.Seconds()
				held += float64(n) * step.Seconds()
			}
			total += float64(partitions) * step.Seconds()
		}
		run.jain = append(run.jain, jain(secs))
	}
	minutes := (window * time.Duration(windows)).Minutes()
	for i, in := range s.inst {
		run.callsPerMin = max(run.callsPerMin, float64(in.r.Stats().StorageCalls-calls0[i])/minutes)
	}
	run.utilisation = held / total
	return run
}

// jain returns Jain's fairness index of xs: 1 when all are equal, 1/n when
// one has everything.
func jain(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// TestSharedRotation runs instances that all want every partition, in
// counts that do not divide the partitions evenly. With more instances than
// partitions (128 over 20) most would hold nothing forever without
// rotation; with a remainder (64 over 100: 36 hold two, 28 one) the same
// instances would always hold more. Rotation evens out each instance's
// partition-seconds over the windows of the goals, at little cost in
// utilisation and storage calls.
func TestSharedRotation(t *testing.T) {
	for _, c := range []struct {
		instances   int
		partitions  uint32
		window      time.Duration
		windows     int
		utilisation float64
		jain        float64
	}{
		{128, 20, time.Minute, 2, 0.97, 0.95},
		{64, 20, time.Minute, 1, 0.97, 0.95},
		{64, 100, 10 * time.Second, 3, 0.99, 0.99},
		{16, 20, 10 * time.Second, 3, 0.99, 0.99},
		{128, 500, 10 * time.Second, 2, 0.99, 0.99},
	} {
		t.Run(fmt.Sprintf("N=%d,P=%d", c.instances, c.partitions), func(t *testing.T) {
			run := measureRotation(t, c.instances, c.partitions, c.window, c.windows)
			t.Logf("utilisation %.4f, Jain over %v windows %.4f, at most %.0f storage calls per instance per minute", run.utilisation, c.window, run.jain, run.callsPerMin)
			if run.utilisation < c.utilisation {
				t.Errorf("utilisation %.4f, want at least %.2f", run.utilisation, c.utilisation)
			}
			for i, j := range run.jain {
				if j < c.jain {
					t.Errorf("window %d: Jain %.4f, want at least %.2f", i, j, c.jain)
				}
			}
			if run.callsPerMin > 120 {
				t.Errorf("%.0f storage calls per instance per minute, want at most 120", run.callsPerMin)
			}
		})
	}
}

// TestSharedRotationOff: with rotation off, the extra partitions stay with
// the same instances.
func TestSharedRotationOff(t *testing.T) {
	s := newSim(t, simConfig{instances: 3, shared: 20})
	for _, in := range s.inst {
		in.r.rotation = 0
	}
	for i := range s.inst {
		s.giveMe(i, 20)
	}
	s.runFor(5*time.Second, nil)
	first := s.heldAll()
	for range 5 {
		s.runFor(DefaultRotation, nil)
		if got := s.heldAll(); fmt.Sprint(got) != fmt.Sprint(first) {
			t.Fatalf("holdings moved from %v to %v with rotation off", first, got)
		}
	}
}

// TestSharedConvergesAtScale starts 128 instances over 500 partitions at
// the same moment, all wanting everything: within 2 s each holds its fair
// share, 3 or 4 partitions, give or take one, and every partition is held.
func TestSharedConvergesAtScale(t *testing.T) {
	const instances, partitions = 128, 500
	s := newSim(t, simConfig{instances: instances, shared: partitions})
	for i := range s.inst {
		s.giveMe(i, partitions)
	}
	converged := func() bool {
		total := 0
		for _, n := range s.heldAll() {
			if n < partitions/instances-1 || n > partitions/instances+2 {
				return false
			}
			total += n
		}
		return total == partitions
	}
	start := s.clock.Now()
	for !converged() {
		if s.clock.Now().Sub(start) > 10*time.Second {
			t.Fatalf("not converged after 10 s: %v", s.heldAll())
		}
		s.runFor(10*time.Millisecond, nil)
	}
	took := s.clock.Now().Sub(start)
	t.Logf("128 instances over 500 partitions converged in %v", took)
	if took > 2*time.Second {
		t.Fatalf("converged in %v, want within 2 s", took)
	}
}

// measureChurn runs instances that all want every partition, lets them
// settle, then every 10 s for rounds rounds sets a random quarter of them to
// a new demand (none, one partition or all, other than the current one),
// and returns the partition-seconds lost: partitions idle while some
// instance wanted more than it held (at most that shortfall), as a share of
// all the partition-seconds there were.
func measureChurn(t *testing.T, instances int, partitions uint32, rounds int) float64 {
	t.Helper()
	s := newSim(t, simConfig{instances: instances, shared: partitions})
	demand := make([]uint32, instances)
	for i := range s.inst {
		demand[i] = partitions
		s.giveMe(i, partitions)
	}
	s.runFor(10*time.Second, nil)
	rng := rand.New(rand.NewPCG(7, 7))
	const step = 10 * time.Millisecond
	var lost, total float64
	for range rounds {
		for _, i := range rng.Perm(instances)[:instances/4] {
			choices := []uint32{0, 1, partitions}
			choices = slices.DeleteFunc(choices, func(d uint32) bool { return d == demand[i] })
			demand[i] = choices[rng.IntN(len(choices))]
			s.giveMe(i, demand[i])
		}
		for elapsed := time.Duration(0); elapsed < 10*time.Second; elapsed += step {
			s.runFor(step, nil)
			held, unmet := 0, 0
			for i, n := range s.heldAll() {
				held += n
				unmet += max(int(demand[i])-n, 0)
			}
			lost += float64(min(max(int(partitions)-held, 0), unmet)) * step.Seconds()
			total += float64(partitions) * step.Seconds()
		}
	}
	return lost / total
}

// TestSharedChurnLosesLittle changes a quarter of the demands every 10 s:
// the partitions that instances give up, or that a changed set of demands
// moves to others, are taken again quickly, also with more instances than
// partitions, where any change of who asks moves every turn.
func TestSharedChurnLosesLittle(t *testing.T) {
	for _, c := range []struct {
		instances  int
		partitions uint32
	}{
		{64, 20},
		{128, 20},
		{16, 100},
	} {
		t.Run(fmt.Sprintf("N=%d,P=%d", c.instances, c.partitions), func(t *testing.T) {
			lost := measureChurn(t, c.instances, c.partitions, 3)
			t.Logf("lost %.2f%% of the partition-seconds", 100*lost)
			if lost > 0.02 {
				t.Errorf("lost %.2f%% of the partition-seconds under churn, want at most 2%%", 100*lost)
			}
		})
	}
}

// TestNextTurnMatchesShares checks nextTurn against fairShares epoch by
// epoch: the share of each owner stays the same until the epoch nextTurn
// names, and changes there.
func TestNextTurnMatchesShares(t *testing.T) {
	for _, c := range []struct{ partitions, owners int }{{20, 128}, {100, 64}, {20, 16}, {3, 7}, {5, 6}} {
		demands := map[string]uint32{}
		for i := range c.owners {
			demands[fmt.Sprintf("owner-%03d", i)] = uint32(c.partitions)
		}
		for i := 0; i < c.owners; i += 5 {
			o := fmt.Sprintf("owner-%03d", i)
			for e := uint64(500); e < 500+uint64(c.owners); e += 7 {
				next, ok := newSplit(c.partitions, demands).nextTurn(o, e)
				if !ok {
					t.Fatalf("%d over %d: nextTurn(%s, epoch %d) says the share never changes", c.partitions, c.owners, o, e)
				}
				now, _ := fairShares(c.partitions, demands, e)
				for k := e + 1; k < next; k++ {
					if s, _ := fairShares(c.partitions, demands, k); s[o] != now[o] {
						t.Fatalf("%d over %d: %s's share changes at epoch %d, before %d that nextTurn named", c.partitions, c.owners, o, k, next)
					}
				}
				if s, _ := fairShares(c.partitions, demands, next); s[o] == now[o] {
					t.Fatalf("%d over %d: %s's share does not change at epoch %d that nextTurn named", c.partitions, c.owners, o, next)
				}
			}
		}
	}
	// A split that does not rotate has no turns.
	demands := map[string]uint32{}
	for i := range 16 {
		demands[fmt.Sprintf("owner-%03d", i)] = 500
	}
	if _, ok := newSplit(500, demands).nextTurn("owner-003", 3); ok {
		t.Fatal("nextTurn names a turn for 500 partitions over 16 owners, which do not rotate (31 and 32)")
	}
}
