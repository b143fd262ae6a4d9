package adaptive

import (
	"testing"
	"time"
)

// datastore is a metered datastore in the way Cosmos DB meters one: a budget
// of RU per second, and a request that finds the second's budget spent is
// throttled (429) with a retry-after until the next second, and charged
// nothing.
type datastore struct {
	budget int64 // RU per second
	second int64 // index of the current second
	spent  int64 // RU spent in it
}

// serve charges cost at now and reports whether it was admitted; when not,
// it returns the retry-after.
func (d *datastore) serve(now time.Duration, cost int64) (bool, time.Duration) {
	if s := int64(now / time.Second); s != d.second {
		d.second, d.spent = s, 0
	}
	if d.spent+cost > d.budget {
		return false, time.Duration(d.second+1)*time.Second - now
	}
	d.spent += cost
	return true, 0
}

// simResult is what a sender achieved in a simulation after it settled.
type simResult struct {
	sent, throttled int64
	rate, util      float64
	foreignDenied   float64 // share of the foreign client's RU throttled
}

const (
	simBudget  = 10000 // RU/s
	simForeign = 3000  // RU/s taken by the other client
)

// simulate runs a sender that sends requests of 10 RU at the capacity that
// capacity returns, pausing for the retry-after of each 429 and reporting it
// to throttled, against a datastore whose budget a foreign client, unknown
// to the sender, takes 30 % of; it counts from the tenth second of 70.
func simulate(set func(time.Duration), capacity func() uint32, throttled func(time.Duration)) simResult {
	const (
		cost   = 10
		tick   = 10 * time.Millisecond
		run    = 70 * time.Second
		settle = 10 * time.Second
	)
	ds := &datastore{budget: simBudget, second: -1}
	var carry float64
	var pausedUntil time.Duration
	var r simResult
	var usedRU, foreignRU, foreignDenied int64
	for now := time.Duration(0); now < run; now += tick {
		set(now)
		// The foreign client spreads its load evenly and goes first in
		// each tick.
		fcost := simForeign * int64(tick) / int64(time.Second)
		if ok, _ := ds.serve(now, fcost); now >= settle {
			foreignRU += fcost
			if !ok {
				foreignDenied += fcost
			}
		}
		if now < pausedUntil {
			continue
		}
		carry += float64(capacity()) * tick.Seconds() / cost
		for ; carry >= 1; carry-- {
			ok, retry := ds.serve(now, cost)
			if now >= settle {
				r.sent++
			}
			if !ok {
				if now >= settle {
					r.throttled++
				}
				throttled(retry)
				pausedUntil = now + retry
				carry = 0
				break
			}
			if now >= settle {
				usedRU += cost
			}
		}
	}
	r.rate = float64(r.throttled) / float64(r.sent)
	r.util = float64(usedRU) / ((simBudget - simForeign) * (run - settle).Seconds())
	r.foreignDenied = float64(foreignDenied) / float64(foreignRU)
	return r
}

// TestLearnsWhatAForeignClientLeaves checks the goal: after ten seconds the
// sender is throttled on at most 1 % of its requests and uses at least 90 %
// of the 70 % of the budget that the foreign client leaves. The same sender
// on the provisioned capacity alone is reported beside it.
func TestLearnsWhatAForeignClientLeaves(t *testing.T) {
	inner := newFixed(simBudget)
	l, fc, _ := started(t, inner, nil)
	got := simulate(func(d time.Duration) { fc.Set(t0.Add(d)) }, l.Capacity, l.Throttled)
	plain := simulate(func(time.Duration) {}, inner.Capacity, func(time.Duration) {})
	t.Logf("adaptive: %d requests, %d throttled (%.3f %%), %.1f %% of the room left used, %.1f %% of the foreign client's RU throttled",
		got.sent, got.throttled, 100*got.rate, 100*got.util, 100*got.foreignDenied)
	t.Logf("provisioned capacity alone: %d requests, %d throttled (%.3f %%), %.1f %% of the room left used, %.1f %% of the foreign client's RU throttled",
		plain.sent, plain.throttled, 100*plain.rate, 100*plain.util, 100*plain.foreignDenied)
	if got.rate > 0.01 {
		t.Errorf("throttled on %.2f %% of requests, want at most 1 %%", 100*got.rate)
	}
	if got.util < 0.90 {
		t.Errorf("used %.1f %% of the room the foreign client leaves, want at least 90 %%", 100*got.util)
	}
	if got.util > 1.0001 {
		t.Errorf("used %.3f of the room left, taking the foreign client's share", got.util)
	}
	if got.foreignDenied > 0.01 {
		t.Errorf("%.1f %% of the foreign client's RU throttled, want at most 1 %%", 100*got.foreignDenied)
	}
}
