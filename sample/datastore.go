package main

import (
	"context"
	"sort"
	"sync"
	"time"
)

// store is what a replica writes to: the in-process datastore or a client of
// one served by another process. Write charges ru request units to replica's
// account; a positive retryAfter means the request was throttled (HTTP 429)
// and nothing was written.
type store interface {
	Write(ctx context.Context, replica string, ru uint32) (retryAfter time.Duration, err error)
}

// usage counts what one replica did in one window.
type usage struct {
	AcceptedRU  uint64 `json:"accepted_ru"`
	Requests    uint64 `json:"requests"`
	Throttled   uint64 `json:"throttled"` // 429 responses
	ThrottledRU uint64 `json:"throttled_ru"`
}

// add accumulates u2 into u.
func (u *usage) add(u2 usage) {
	u.AcceptedRU += u2.AcceptedRU
	u.Requests += u2.Requests
	u.Throttled += u2.Throttled
	u.ThrottledRU += u2.ThrottledRU
}

// Datastore simulates a Cosmos DB container with provisioned throughput:
// time is cut into one-second windows counted from its creation, each
// request is charged its cost in request units (RU), and a request that
// would take the current window past the budget is refused with a 429 and a
// retry-after that points at the next window. It counts, per window and per
// replica, the RU accepted and the requests throttled. Every request also
// takes the configured latency, as a network round trip would. It is safe
// for concurrent use.
type Datastore struct {
	budget  uint64
	latency time.Duration
	start   time.Time
	now     func() time.Time // the clock; tests replace it

	mu      sync.Mutex
	window  int     // index of the current window
	used    uint64  // RU accepted in the current window
	windows []usage // totals per window
	by      []map[string]*usage
}

// newDatastore returns a datastore provisioned with budget RU/s whose
// windows start now.
func newDatastore(budget uint32, latency time.Duration) *Datastore {
	return &Datastore{budget: uint64(budget), latency: latency, start: time.Now(), now: time.Now}
}

// Start returns when window 0 began; window k spans [Start+k s, Start+k+1 s).
func (d *Datastore) Start() time.Time { return d.start }

// Budget returns the provisioned RU/s.
func (d *Datastore) Budget() uint64 { return d.budget }

// Write charges ru to the current window, or throttles the request when the
// window cannot take it. It answers after the simulated latency (or when
// ctx ends, returning ctx.Err()).
func (d *Datastore) Write(ctx context.Context, replica string, ru uint32) (time.Duration, error) {
	retry := d.charge(replica, uint64(ru))
	if err := sleep(ctx, d.latency); err != nil {
		return 0, err
	}
	return retry, nil
}

// charge does the accounting of Write under the lock and returns the
// retry-after, zero when the request was accepted. The clock is read under
// the lock so that windows only ever move forward.
func (d *Datastore) charge(replica string, ru uint64) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	k := int(now.Sub(d.start) / time.Second)
	if k != d.window {
		d.window, d.used = k, 0
	}
	u := d.slot(k, replica)
	if d.used+ru > d.budget {
		u.Throttled++
		u.ThrottledRU += ru
		d.windows[k].Throttled++
		d.windows[k].ThrottledRU += ru
		retry := d.start.Add(time.Duration(k+1) * time.Second).Sub(now)
		return max(retry, time.Millisecond)
	}
	d.used += ru
	u.AcceptedRU += ru
	u.Requests++
	d.windows[k].AcceptedRU += ru
	d.windows[k].Requests++
	return 0
}

// slot returns replica's counters for window k, growing the tables.
// Requires d.mu.
func (d *Datastore) slot(k int, replica string) *usage {
	for len(d.windows) <= k {
		d.windows = append(d.windows, usage{})
		d.by = append(d.by, map[string]*usage{})
	}
	u := d.by[k][replica]
	if u == nil {
		u = &usage{}
		d.by[k][replica] = u
	}
	return u
}

// Window returns what each replica did in window k (empty when nothing
// arrived in it) and the total.
func (d *Datastore) Window(k int) (map[string]usage, usage) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]usage{}
	if k < 0 || k >= len(d.windows) {
		return out, usage{}
	}
	for name, u := range d.by[k] {
		out[name] = *u
	}
	return out, d.windows[k]
}

// Total returns what every replica did in every window.
func (d *Datastore) Total() usage {
	d.mu.Lock()
	defer d.mu.Unlock()
	var t usage
	for _, w := range d.windows {
		t.add(w)
	}
	return t
}

// Replicas returns the names of every replica that wrote, sorted.
func (d *Datastore) Replicas() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	seen := map[string]bool{}
	var names []string
	for _, m := range d.by {
		for name := range m {
			if !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
		}
	}
	sort.Strings(names)
	return names
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
