package main

import (
	"context"
	"fmt"
	"time"

	"github.com/rs/zerolog"
)

// runResult is everything one run of the scenario produced.
type runResult struct {
	Library  bool
	Names    []string
	Budget   uint64
	Reserved uint32
	Seconds  []second
	Jobs     []jobOutcome
	Elapsed  time.Duration // from the first job sent to the last answer
	Windows  int           // datastore windows from the first job sent to the last answer
	From, To time.Duration // the first job sent and the last answer, since window 0 began
	Total    usage
	Failed   uint64       // records given up on
	Users    []userSample // the user requests
}

// label names the run in the summary and the report.
func (r *runResult) label() string {
	if r.Library {
		return "with the library"
	}
	return "without the library"
}

// runScenario runs the scenario once against a fresh datastore and fresh
// replicas, with the library (lib) or without, and returns what happened.
func runScenario(ctx context.Context, cfg config, lib bool, log zerolog.Logger) (*runResult, error) {
	ds := newDatastore(cfg.budget, cfg.latency)
	reps, cleanup, err := startReplicas(ctx, cfg, lib, ds, log)
	if err != nil {
		return nil, err
	}
	res := &runResult{Library: lib, Budget: ds.Budget(), Reserved: cfg.reserve()}
	urls := make([]string, len(reps))
	for i, r := range reps {
		res.Names = append(res.Names, r.name)
		urls[i] = r.url()
	}
	users := newUserLog(ds.Start())
	mon := newRunMonitor(cfg, ds, reps, lib, users, log)
	monCtx, stopMon := context.WithCancel(ctx)
	go mon.run(monCtx)

	stopUsers, usersDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(usersDone)
		runUsers(ctx, cfg, urls, users, stopUsers, log)
	}()
	t0 := time.Now()
	res.Jobs = runLoad(ctx, scenario(cfg), urls, cfg.cost, log)
	t1 := time.Now()
	close(stopUsers)
	<-usersDone
	res.Elapsed = t1.Sub(t0)
	res.From, res.To = t0.Sub(ds.Start()), t1.Sub(ds.Start())
	res.Windows = int(res.To/time.Second) - int(res.From/time.Second) + 1
	res.Users = users.all()
	stopMon()
	<-mon.done
	res.Seconds = mon.series
	cleanup()
	res.Total = ds.Total()
	for _, r := range reps {
		res.Failed += r.failed.Load()
	}
	return res, ctx.Err()
}

// startReplicas starts cfg.replicas replicas writing to st, each with its
// own HTTP server and, with the library, its own batcher and shared
// resource over one coordination store. cleanup stops them all.
func startReplicas(ctx context.Context, cfg config, lib bool, st store, log zerolog.Logger) ([]*replica, func(), error) {
	var lims *limiters
	if lib {
		var err error
		if lims, err = newLimiters(cfg); err != nil {
			return nil, nil, err
		}
		log.Info().Str("store", lims.describe()).Uint32("shared", cfg.shared()).Uint32("reserved", cfg.reserve()).
			Uint32("factor", cfg.factor).Msg("replicas share the budget through leases")
	}
	var reps []*replica
	cleanup := func() {
		// Let the replicas finish what they hold, unless the run was
		// interrupted: then stop at once.
		grace := 10 * time.Second
		if ctx.Err() != nil {
			grace = 0
		}
		stopCtx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		for _, r := range reps {
			r.stop(stopCtx)
		}
		if lims != nil {
			lims.close()
		}
	}
	for i := 0; i < cfg.replicas; i++ {
		r, err := startReplica(ctx, cfg, fmt.Sprintf("r%d", i+1), portFor(cfg.port, i), st, lims, log)
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		reps = append(reps, r)
	}
	return reps, cleanup, nil
}

// portFor returns replica i's port: base+i, or 0 (any free port).
func portFor(base, i int) int {
	if base == 0 {
		return 0
	}
	return base + i
}

// startReplica makes one replica; lims is nil for the run without the
// library.
func startReplica(ctx context.Context, cfg config, name string, port int, st store, lims *limiters, log zerolog.Logger) (*replica, error) {
	r := newReplica(name, cfg, st, log)
	if lims == nil {
		r.ing = newDirectIngester(r, cfg.workers)
	} else {
		lim, err := lims.make()
		if err != nil {
			return nil, err
		}
		li, err := newLibIngester(ctx, r, lim)
		if err != nil {
			return nil, err
		}
		r.ing = li
	}
	if err := r.listen(port); err != nil {
		r.stop(ctx)
		return nil, err
	}
	return r, nil
}

// newRunMonitor watches the replicas of one run and the datastore.
func newRunMonitor(cfg config, ds *Datastore, reps []*replica, lib bool, users *userLog, log zerolog.Logger) *monitor {
	names := make([]string, len(reps))
	for i, r := range reps {
		names[i] = r.name
	}
	return &monitor{
		names: names, budget: ds.Budget(), start: ds.Start(), limited: lib, keep: true,
		log: log, json: cfg.logFormat == "json", done: make(chan struct{}),
		probe: func() []probe {
			ps := make([]probe, len(reps))
			for i, r := range reps {
				ps[i] = probe{Capacity: r.ing.capacity(), Outstanding: r.outstanding.Load()}
			}
			return ps
		},
		window: datastoreWindow(ds),
		users:  users.window,
	}
}

// datastoreWindow reads window k of ds for the replicas names.
func datastoreWindow(ds *Datastore) func(k int, names []string) []usage {
	return func(k int, names []string) []usage {
		by, _ := ds.Window(k)
		out := make([]usage, len(names))
		for i, n := range names {
			out[i] = by[n]
		}
		return out
	}
}
