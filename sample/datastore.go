package main

import (
	"context"
	"sort"
	"sync"
	"time"
)

// store is what a replica writes to: the in-process datastore or a client of
// one served by another process. Write sends one request costing ru request
// units on replica's account, from the bulk jobs or, when interactive is
// set, from a user's request; a positive retryAfter means the request was
// throttled (HTTP 429): nothing was done and nothing charged.
type store interface {
	Write(ctx context.Context, replica string, ru uint32, interactive bool) (retryAfter time.Duration, err error)
}

// usage counts what one replica did in one window. The first four fields
// count every request; the Interactive ones count the interactive requests
// among them, so the bulk jobs' part is the difference.
type usage struct {
	AcceptedRU  uint64 `json:"accepted_ru"`
	Requests    uint64 `json:"requests"`
	Throttled   uint64 `json:"throttled"` // 429 responses
	ThrottledRU uint64 `json:"throttled_ru"`

	InteractiveRU        uint64 `json:"interactive_ru"`
	InteractiveRequests  uint64 `json:"interactive_requests"`
	InteractiveThrottled uint64 `json:"interactive_throttled"`
}

// add accumulates u2 into u.
func (u *usage) add(u2 usage) {
	u.AcceptedRU += u2.AcceptedRU
	u.Requests += u2.Requests
	u.Throttled += u2.Throttled
	u.ThrottledRU += u2.ThrottledRU
	u.InteractiveRU += u2.InteractiveRU
	u.InteractiveRequests += u2.InteractiveRequests
	u.InteractiveThrottled += u2.InteractiveThrottled
}

// bulkRU returns the RU accepted from the bulk jobs.
func (u usage) bulkRU() uint64 { return u.AcceptedRU - u.InteractiveRU }

// Datastore simulates a Cosmos DB container with provisioned throughput:
// time is cut into one-second windows counted from its creation, each
// request is charged its cost in request units (RU), and a request that
// would take the current window past the budget is refused with a 429 and a
// retry-after that points at the next window. As in Cosmos DB, a throttled
// request is not charged, but it still takes a round trip; what else it
// costs (the wait, the retry budget) is the client's business. Interactive
// and bulk requests are metered alike and counted apart. It counts, per window and per
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
func (d *Datastore) Write(ctx context.Context, replica string, ru uint32, interactive bool) (time.Duration, error) {
	retry := d.charge(replica, uint64(ru), interactive)
	if err := sleep(ctx, d.latency); err != nil {
		return 0, err
	}
	return retry, nil
}

// charge does the accounting of Write under the lock and returns the
// retry-after, zero when the request was accepted. The clock is read under
// the lock so that windows only ever move forward.
func (d *Datastore) charge(replica string, ru uint64, interactive bool) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	k := int(now.Sub(d.start) / time.Second)
	if k != d.window {
		d.window, d.used = k, 0
	}
	var c usage
	retry := time.Duration(0)
	if d.used+ru > d.budget {
		c = usage{Throttled: 1, ThrottledRU: ru}
		if interactive {
			c.InteractiveThrottled = 1
		}
		retry = max(d.start.Add(time.Duration(k+1)*time.Second).Sub(now), time.Millisecond)
	} else {
		d.used += ru
		c = usage{AcceptedRU: ru, Requests: 1}
		if interactive {
			c.InteractiveRU, c.InteractiveRequests = ru, 1
		}
	}
	d.slot(k, replica).add(c)
	d.windows[k].add(c)
	return retry
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
