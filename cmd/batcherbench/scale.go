package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"time"
)

// The scale scenario measures how the sharing of a capacity behaves, and
// what it costs, as a deployment grows: for each N instances and P
// partitions of the grid (plan.scale), N instances of one shared capacity
// of P partitions, all in this process (the only way to get a hundred on
// one machine), each demanding all P, on every chosen store.
//
// A cell runs in three phases, sampling every instance's Stats throughout:
//
//   - convergence: from one moment when every instance asks for all P,
//     until every instance holds its fair share ±1 partition (see settled;
//     when N > P, until every partition is held and nobody holds more than
//     one);
//   - steady: utilisation (partitions held ÷ P, every 100 ms), Jain's index
//     of the instances' partition-seconds over windows (10 s when N ≤ P,
//     60 s sliding every 10 s when N > P, where fairness can only come from
//     taking turns), storage calls and their failures from the instances'
//     Stats counters, and the process's CPU time, both per instance per
//     minute;
//   - churn: every 10 s a random quarter of the instances changes its
//     demand (to none, one partition, or all): the time until the shares
//     settle again, and the partition-seconds lost (partitions idle while
//     an instance wants more than it holds) as a share of all there were.
//
// Every sample also checks that no instance counts more partitions than
// the store granted it (see ledger) and that together they count no more
// than P: the conditions without which two instances could count one
// partition.

// scaleSample is the sampling period of the steady phase; convergence and
// churn sample faster, to time them.
const (
	scaleSample     = 100 * time.Millisecond
	scaleFastSample = 10 * time.Millisecond
)

// scaleRun is one cell: its instances, what each demands and held at the
// last sample, and the safety check's tally. Owned by the goroutine that
// runs the cell.
type scaleRun struct {
	p       int
	ins     []*instance
	owners  []string
	led     *ledger
	counted []requestCounter // each instance's store, when it counts its own requests
	demands []int            // partitions each instance asks for
	held    []int            // partitions each instance counted at the last sample

	samples, violations int
	firstViolation      string
}

// startScaleRun starts n instances of a capacity of p partitions in ns,
// idle until converge gives them demand.
func startScaleRun(ctx context.Context, ns *namespace, n, p int) (*scaleRun, error) {
	r := &scaleRun{p: p, led: newLedger(), demands: make([]int, n), held: make([]int, n)}
	for i := 0; i < n; i++ {
		mgr := ns.newManager()
		rc, _ := mgr.(requestCounter)
		r.counted = append(r.counted, rc)
		in, err := startInstanceOn(ctx, r.led.wrap(mgr), uint32(p)*sharedFactor)
		if err != nil {
			stopAll(r.ins)
			return nil, fmt.Errorf("instance %d of %d: %w", i+1, n, err)
		}
		r.ins = append(r.ins, in)
		r.owners = append(r.owners, in.Owner())
	}
	return r, nil
}

// sample reads what every instance counts into r.held and checks it
// against what the store granted.
func (r *scaleRun) sample() {
	granted, before := r.led.holdings(time.Now())
	total := 0
	for i, in := range r.ins {
		r.held[i] = in.Stats().Held
		total += r.held[i]
	}
	bad := countingViolations(r.owners, r.held, granted, before, r.led.acquired())
	r.samples++
	if len(bad) == 0 && total <= r.p {
		return
	}
	r.violations++
	if r.firstViolation == "" {
		r.firstViolation = fmt.Sprintf("%d partitions counted of %d; instances counting more than granted: %v", total, r.p, bad)
	}
}

// setDemand makes instance i ask for d partitions.
func (r *scaleRun) setDemand(i, d int) {
	r.demands[i] = d
	r.ins[i].GiveMe(uint32(d) * sharedFactor)
}

// converge gives every instance a demand of all partitions at once and
// returns the time until the shares settled, or -1 when they did not
// within limit.
func (r *scaleRun) converge(ctx context.Context, limit time.Duration) time.Duration {
	start := time.Now()
	for i := range r.ins {
		r.setDemand(i, r.p)
	}
	took := time.Duration(-1)
	tickUntil(ctx, limit, scaleFastSample, func(at time.Duration) bool {
		r.sample()
		if settled(r.p, r.demands, r.held) {
			took = time.Since(start)
			return false
		}
		return true
	})
	return took
}

// steadyFigures are what the steady phase measured.
type steadyFigures struct {
	log          *heldLog
	took         time.Duration
	calls, fails uint64  // storage calls of all instances
	busiest      float64 // calls per minute of the busiest instance
	cpu          time.Duration
}

// requestCounter is a lease manager that counts the requests it sends to
// its store; one of its calls may take several (the lease table's read and
// conditional write, and their retries).
type requestCounter interface {
	Requests() (sent, failed uint64)
}

// storageCalls returns each instance's storage calls and failures so far:
// the requests its store counted, when it counts them, else its lease
// manager calls.
func (r *scaleRun) storageCalls() (calls, fails []uint64) {
	stats := statsOf(r.ins)
	calls, fails = make([]uint64, len(stats)), make([]uint64, len(stats))
	for i, st := range stats {
		calls[i], fails[i] = st.StorageCalls, st.StorageFailures
		if i < len(r.counted) && r.counted[i] != nil {
			calls[i], fails[i] = r.counted[i].Requests()
		}
	}
	return calls, fails
}

// steady samples for d with bookkeeping buckets of bucket.
func (r *scaleRun) steady(ctx context.Context, d, bucket time.Duration) steadyFigures {
	calls0, fails0 := r.storageCalls()
	cpu0, start := processCPU(), time.Now()
	f := steadyFigures{log: newHeldLog(r.p, bucket)}
	tickUntil(ctx, d, scaleSample, func(at time.Duration) bool {
		r.sample()
		f.log.add(at, r.held, r.demands)
		return true
	})
	f.took, f.cpu = time.Since(start), processCPU()-cpu0
	calls1, fails1 := r.storageCalls()
	for i := range calls1 {
		c := calls1[i] - calls0[i]
		f.calls += c
		f.fails += fails1[i] - fails0[i]
		f.busiest = max(f.busiest, perMinute(c, f.took))
	}
	return f
}

// churn changes a quarter of the demands every every, for d, and returns
// the bookkeeping and the time each change took to settle (negative: not
// before the next one).
func (r *scaleRun) churn(ctx context.Context, d, every time.Duration, rng *rand.Rand) (*heldLog, []time.Duration) {
	log := newHeldLog(r.p, every)
	var settleTimes []time.Duration
	next, changed, pending := time.Duration(0), time.Duration(0), false
	tickUntil(ctx, d, scaleFastSample*2, func(at time.Duration) bool {
		if at >= next && at < d {
			if pending {
				settleTimes = append(settleTimes, -1)
			}
			r.change(rng)
			changed, pending, next = at, true, next+every
		}
		r.sample()
		log.add(at, r.held, r.demands)
		if pending && settled(r.p, r.demands, r.held) {
			settleTimes = append(settleTimes, at-changed)
			pending = false
		}
		return true
	})
	if pending {
		settleTimes = append(settleTimes, -1)
	}
	return log, settleTimes
}

// change gives a random quarter of the instances (at least one) a new
// demand: none, one partition or all, other than what each asks for now.
func (r *scaleRun) change(rng *rand.Rand) {
	k := max(1, len(r.ins)/4)
	for _, i := range rng.Perm(len(r.ins))[:k] {
		var choices []int
		for _, d := range []int{0, 1, r.p} {
			if d != r.demands[i] && !slices.Contains(choices, d) {
				choices = append(choices, d)
			}
		}
		r.setDemand(i, choices[rng.IntN(len(choices))])
	}
}

// tickUntil calls fn every period with the time since it began, until fn
// returns false, d has passed (the last call comes at d or just after) or
// ctx ends.
func tickUntil(ctx context.Context, d, period time.Duration, fn func(at time.Duration) bool) {
	start := time.Now()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		at := time.Since(start)
		if !fn(at) || at >= d {
			return
		}
	}
}

// processCPU returns the user and system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
