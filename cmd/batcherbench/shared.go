package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/costwise/batcher"
)

// The configuration of the shared-capacity issue: 20 partitions of 1,000.
const (
	sharedCap    = 20000
	sharedFactor = 1000
	partitions   = sharedCap / sharedFactor
)

// sharedCapacity runs the shared-capacity scenarios on every chosen store.
func (b *bench) sharedCapacity(ctx context.Context) {
	for _, name := range b.opts.stores {
		if ctx.Err() != nil {
			return
		}
		st, err := connectStore(ctx, name)
		if err != nil {
			b.storeUnavailable("shared capacity", name, err)
			continue
		}
		b.logf("shared capacity on %s", name)
		b.sharedOn(ctx, st)
		st.shut()
	}
}

// storeUnavailable reports a store that cannot be used for scenario:
// skipped, except under CI=true, where scripts/test starts every store and
// its absence is an error.
func (b *bench) storeUnavailable(scenario, name string, err error) {
	row := result{Scenario: scenario, Case: "(all scenarios)", Store: name}
	var un unavailableError
	switch {
	case errors.As(err, &un) && !b.opts.ci:
		row.Status, row.Note = statusSkipped, un.why
	case errors.As(err, &un):
		row.Status, row.Note = statusError, "CI=true but "+un.why
	default:
		row.Status, row.Note = statusError, err.Error()
	}
	b.logf("%s on %s: %s: %s", scenario, name, row.Status, row.Note)
	b.rep.add(row)
}

// sharedOn runs each scenario in a namespace of its own on st.
func (b *bench) sharedOn(ctx context.Context, st *store) {
	parts := []struct {
		name string
		run  func(context.Context, *namespace) ([]result, error)
	}{
		{"ramp and alone at full demand", b.rampAndAlone},
		{"four instances", b.fourInstances},
		{"hand-off and Stop", b.handoffAndStop},
	}
	for _, p := range parts {
		if ctx.Err() != nil {
			return
		}
		rows, err := b.inNamespace(ctx, st, p.run)
		if err != nil {
			rows = append(rows, result{Case: p.name, Status: statusError, Note: err.Error()})
		}
		for _, row := range rows {
			row.Scenario, row.Store = "shared capacity", st.name
			b.rep.add(row)
			b.logf("shared %s on %s: %s (%s)", row.Case, st.name, row.Ours, row.Status)
		}
	}
}

// inNamespace opens a namespace, runs fn in it and deletes it.
func (b *bench) inNamespace(ctx context.Context, st *store, fn func(context.Context, *namespace) ([]result, error)) ([]result, error) {
	ns, err := st.open(ctx)
	if err != nil {
		return nil, err
	}
	defer ns.cleanup()
	return fn(ctx, ns)
}

// instance is one SharedResource, as one replica of a service would run it,
// with a count of the error events it raised.
type instance struct {
	*batcher.SharedResource
	errs    atomic.Int64
	lastErr atomic.Value // string
}

// startInstance provisions and starts an instance of the shared capacity
// with its own lease manager.
func startInstance(ctx context.Context, ns *namespace) (*instance, error) {
	return startInstanceOn(ctx, ns.newManager(), sharedCap)
}

// startInstanceOn provisions and starts an instance sharing capacity, in
// partitions of sharedFactor, through mgr.
func startInstanceOn(ctx context.Context, mgr batcher.LeaseManager, capacity uint32) (*instance, error) {
	r := batcher.NewSharedResource(mgr, capacity).WithFactor(sharedFactor)
	in := &instance{SharedResource: r}
	r.AddListener(func(event string, _ int, msg string, _ interface{}) {
		if event == batcher.ErrorEvent {
			in.errs.Add(1)
			in.lastErr.Store(msg)
		}
	})
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.Provision(pctx); err != nil {
		return nil, fmt.Errorf("provision: %w", err)
	}
	if err := r.Start(ctx); err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	return in, nil
}

// startInstances starts n instances, stopping those already started when
// one fails.
func startInstances(ctx context.Context, ns *namespace, n int) ([]*instance, error) {
	var ins []*instance
	for i := 0; i < n; i++ {
		in, err := startInstance(ctx, ns)
		if err != nil {
			stopAll(ins)
			return nil, err
		}
		ins = append(ins, in)
	}
	return ins, nil
}

// stopAll stops the instances at the same time, as replicas shut down.
func stopAll(ins []*instance) {
	var wg sync.WaitGroup
	for _, in := range ins {
		wg.Add(1)
		go func() { defer wg.Done(); in.Stop() }()
	}
	wg.Wait()
}

// errorNote describes the error events the instances raised, if any.
func errorNote(ins ...*instance) string {
	var n int64
	last := ""
	for _, in := range ins {
		n += in.errs.Load()
		if s, ok := in.lastErr.Load().(string); ok {
			last = s
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d error event(s), the last: %s", n, last)
}

// joinNotes joins the non-empty notes with "; ".
func joinNotes(notes ...string) string {
	out := ""
	for _, n := range notes {
		if n == "" {
			continue
		}
		if out != "" {
			out += "; "
		}
		out += n
	}
	return out
}

// waitFor polls cond every millisecond until it holds, ctx ends or limit
// passes, and returns how long it took and whether it held.
func waitFor(ctx context.Context, limit time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		if cond() {
			return time.Since(start), true
		}
		if time.Since(start) > limit {
			return time.Since(start), false
		}
		select {
		case <-ctx.Done():
			return time.Since(start), false
		case <-t.C:
		}
	}
}

// sleepCtx waits for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// full reports whether in holds every partition.
func full(in *instance) func() bool {
	return func() bool { return in.Capacity() >= sharedCap }
}

// perMinute converts a count over d into a rate per minute.
func perMinute(n uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Minutes()
}
