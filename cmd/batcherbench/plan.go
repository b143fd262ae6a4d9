package main

import "time"

// plan holds the sizes and durations of one run. The full plan keeps the
// whole run under about six minutes on a 2-core machine; the quick plan,
// for CI, under about forty seconds, which is too short for steady-state
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
	}
}

// warmWindows is the number of windows the warm-up covers.
func (p plan) warmWindows() int {
	return int(p.fourWarmup / p.fourWindow)
}
