package main

import (
	"context"
	"time"

	"github.com/rs/zerolog"
)

// calibrationTime is how long the user requests run alone before the runs.
const calibrationTime = 3 * time.Second

// calibration is what this machine gives a user request when nothing else
// of the sample runs: the same user load against fresh replicas and a fresh
// datastore, with no bulk job and no library, measured just before the
// runs. The latency goal is relative to it, so that a machine busy with
// other work moves the goal instead of failing it.
type calibration struct {
	Took  time.Duration
	Users userStats
}

// calibrate runs the user requests alone for calibrationTime; it measures
// nothing without cfg.calibrate or without user requests.
func calibrate(ctx context.Context, cfg config, log zerolog.Logger) (calibration, error) {
	if !cfg.calibrate || cfg.interactiveRate <= 0 {
		return calibration{}, nil
	}
	ds := newDatastore(cfg.budget, cfg.latency)
	reps, cleanup, err := startReplicas(ctx, cfg, false, ds, log)
	if err != nil {
		return calibration{}, err
	}
	defer cleanup()
	urls := make([]string, len(reps))
	for i, r := range reps {
		urls[i] = r.url()
	}
	users := newUserLog(ds.Start())
	stop := make(chan struct{})
	timer := time.AfterFunc(calibrationTime, func() { close(stop) })
	defer timer.Stop()
	start := time.Now()
	runUsers(ctx, cfg, urls, users, stop, log)
	return calibration{Took: time.Since(start), Users: statsOf(users.all())}, ctx.Err()
}

// latencyGoal returns the p99 the user requests should keep with the
// library: twice what they got alone on this machine (the calibration), and
// never less than twice the datastore's latency.
func latencyGoal(cfg config, cal calibration) time.Duration {
	return 2 * max(cal.Users.P99, cfg.latency)
}
