package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/rs/zerolog"
)

// runSingle runs one replica with its HTTP server until ctx ends, so that
// replicas in several processes share one budget through the coordination
// store (--store=azure or redis). It writes to the datastore at
// cfg.datastoreURL when set, else to one of its own.
func runSingle(ctx context.Context, cfg config, log zerolog.Logger) error {
	name := cfg.name
	if name == "" {
		name = "replica-" + strconv.Itoa(os.Getpid())
	}
	var st store
	var ds *Datastore
	if cfg.datastoreURL != "" {
		st = newRemoteStore(cfg.datastoreURL)
	} else {
		ds = newDatastore(cfg.budget, cfg.latency)
		st = ds
	}
	if cfg.store == "memory" && cfg.replicas > 1 {
		log.Warn().Msg("--store=memory shares nothing with other processes: this replica only gets the reserved capacity and the shared part")
	}
	lims, err := newLimiters(cfg)
	if err != nil {
		return err
	}
	defer lims.close()
	log.Info().Str("store", lims.describe()).Uint32("shared", cfg.shared()).Uint32("reserved", cfg.reserve()).
		Uint32("factor", cfg.factor).Msg("sharing the budget through leases")
	r, err := startReplica(ctx, cfg, name, cfg.port, st, lims, log)
	if err != nil {
		return err
	}
	mon := singleMonitor(cfg, r, ds, log)
	go mon.run(ctx)
	log.Info().Msgf("send jobs with: curl -s -XPOST %s/ingest -d '{\"records\":20000,\"ru_per_record\":%d}'", r.url(), cfg.cost)
	<-ctx.Done()
	log.Info().Msg("stopping: finishing running jobs (10 s at most) and releasing the partitions")
	<-mon.done
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.stop(stopCtx)
	return nil
}

// singleMonitor watches one replica. Its per-second numbers come from the
// local datastore's windows or, with a remote datastore, from what the
// replica counted itself over the last second.
func singleMonitor(cfg config, r *replica, ds *Datastore, log zerolog.Logger) *monitor {
	m := &monitor{names: []string{r.name}, budget: uint64(cfg.budget), limited: true, quiet: true,
		log: log, json: cfg.logFormat == "json", done: make(chan struct{}),
		probe: func() []probe {
			return []probe{{Capacity: r.ing.capacity(), Outstanding: r.outstanding.Load()}}
		},
	}
	if ds != nil {
		m.start, m.window = ds.Start(), datastoreWindow(ds)
		return m
	}
	m.start = time.Now()
	var last usage
	m.window = func(int, []string) []usage {
		now := usage{AcceptedRU: r.acceptedRU.Load(), Throttled: r.throttled.Load()}
		d := usage{AcceptedRU: now.AcceptedRU - last.AcceptedRU, Throttled: now.Throttled - last.Throttled}
		last = now
		return []usage{d}
	}
	return m
}

// serveDatastore serves the simulated datastore over HTTP on cfg.port
// until ctx ends, logging every second what each replica wrote.
func serveDatastore(ctx context.Context, cfg config, log zerolog.Logger) error {
	ds := newDatastore(cfg.budget, cfg.latency)
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.port)))
	if err != nil {
		return fmt.Errorf("datastore: %w", err)
	}
	srv := &http.Server{Handler: datastoreHandler(ds), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("datastore server stopped")
		}
	}()
	log.Info().Str("url", "http://"+ln.Addr().String()).Uint32("budget", cfg.budget).
		Msg("datastore listening: start replicas with --single --datastore-url at this address")
	m := &monitor{budget: ds.Budget(), start: ds.Start(), log: log, json: cfg.logFormat == "json", quiet: true,
		done: make(chan struct{}), refresh: ds.Replicas, window: datastoreWindow(ds)}
	go m.run(ctx)
	<-ctx.Done()
	<-m.done
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(stopCtx)
}
