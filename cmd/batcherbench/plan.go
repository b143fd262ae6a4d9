package main

import "time"

// plan holds the sizes and durations of one run. The full plan keeps the
// whole run under about six minutes on a 2-core machine, without the scale
// scenario, which takes about 13 minutes per store; the quick plan, for CI,
// under about fifty seconds, which is too short for steady-state
// figures: it proves that every scenario runs, nothing more.
type plan struct {
	throughputOps  int // operations per throughput run
	throughputRuns int // runs per case; the median is reported

	rateRun      time.Duration // length of one rate-accuracy run
	rateWarmup   time.Duration // excluded from the windows
	rateWindow   time.Duration
	rateParallel bool // run the rate cases at the same time

	latencyBatchable int // lone batchable operations, one at a time
	latencyAlone     int // lone non-batchable operations

	rampRuns    int           // ramps of a lone instance; the median is reported
	aloneRun    time.Duration // an instance alone at full demand
	fourRun     time.Duration // four instances demanding everything
	fourWindow  time.Duration // fairness and utilisation windows
	fourWarmup  time.Duration // excluded: convergence; a whole number of windows
	handoffHold time.Duration // A holds everything this long before the hand-off
	waitLimit   time.Duration // longest wait for a shared-capacity condition

	fairRun  time.Duration // fair release: wait after the newcomer; high's backlog is half of it
	fairLong time.Duration // fair release: the weighted shares and the settled rate

	scale scalePlan
}

// scalePlan holds the grid and the phases of the scale scenario. Jain's
// index is taken over windows of scaleWindow after convergence when every
// instance is due a partition or more (N ≤ P), and over sliding windows of
// wideWindow, one starting every bucket, when fewer partitions than
// instances make fairness a matter of taking turns (N > P).
type scalePlan struct {
	ns, ps        []int         // instance and partition counts of the grid
	bucket        time.Duration // bookkeeping unit; windows are whole buckets
	window        time.Duration // Jain window, N ≤ P
	wideWindow    time.Duration // Jain window, N > P
	steady        time.Duration // measured after convergence, N ≤ P
	wideSteady    time.Duration // measured after convergence, N > P
	churn         time.Duration // the churn phase; zero skips it
	churnEvery    time.Duration // a quarter of the instances change demand this often
	convergeLimit time.Duration // longest wait for convergence
}

// steadyFor returns the steady phase and the Jain window of a cell of n
// instances and p partitions.
func (s scalePlan) steadyFor(n, p int) (steady, window time.Duration) {
	if n > p {
		return s.wideSteady, s.wideWindow
	}
	return s.steady, s.window
}

// planFor returns the quick plan or the full one.
func planFor(quick bool) plan {
	if quick {
		return plan{
			throughputOps: 200_000, throughputRuns: 1,
			rateRun: 3 * time.Second, rateWarmup: time.Second, rateWindow: time.Second, rateParallel: true,
			latencyBatchable: 10, latencyAlone: 200,
			rampRuns: 1, aloneRun: 2 * time.Second,
			fourRun: 5 * time.Second, fourWindow: time.Second, fourWarmup: 2 * time.Second,
			handoffHold: 500 * time.Millisecond, waitLimit: 20 * time.Second,
			fairRun: time.Second, fairLong: 3 * time.Second,
			scale: scalePlan{
				ns: []int{16}, ps: []int{20}, bucket: 2 * time.Second, window: 2 * time.Second, wideWindow: 4 * time.Second,
				steady: 4 * time.Second, wideSteady: 6 * time.Second, churn: 4 * time.Second, churnEvery: 2 * time.Second,
				convergeLimit: 20 * time.Second,
			},
		}
	}
	return plan{
		throughputOps: 1_000_000, throughputRuns: 3,
		rateRun: 10 * time.Second, rateWarmup: time.Second, rateWindow: time.Second,
		latencyBatchable: 150, latencyAlone: 1000,
		rampRuns: 3, aloneRun: 30 * time.Second,
		fourRun: 40 * time.Second, fourWindow: 5 * time.Second, fourWarmup: 5 * time.Second,
		handoffHold: 3 * time.Second, waitLimit: 45 * time.Second,
		fairRun: 2 * time.Second, fairLong: 10 * time.Second,
		// About 13 minutes per store for the whole grid: 9 cells of 20 s
		// steady and 30 s churn, 3 (N > P) of 70 s and 30 s, plus start,
		// convergence and stop.
		scale: scalePlan{
			ns: []int{4, 16, 64, 128}, ps: []int{20, 100, 500}, bucket: 10 * time.Second,
			window: 10 * time.Second, wideWindow: 60 * time.Second,
			steady: 20 * time.Second, wideSteady: 70 * time.Second, churn: 30 * time.Second, churnEvery: 10 * time.Second,
			convergeLimit: 60 * time.Second,
		},
	}
}

// warmWindows is the number of windows the warm-up covers.
func (p plan) warmWindows() int {
	return int(p.fourWarmup / p.fourWindow)
}
