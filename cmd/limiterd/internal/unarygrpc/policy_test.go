package unarygrpc

import (
	"testing"
	"time"
)

// TestPingPolicy steps the ping policy through a table, clock in hand.
func TestPingPolicy(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type step struct {
		at      time.Duration
		calls   int
		forgive bool // the server sent HEADERS or DATA before this ping
		tooMany bool
	}
	for _, tc := range []struct {
		name   string
		policy pingPolicy
		steps  []step
	}{
		{"idle, pings a minute apart: the third strike ends it", pingPolicy{}, []step{
			{0, 0, false, false}, {time.Minute, 0, false, false}, {2 * time.Minute, 0, false, false}, {3 * time.Minute, 0, false, true},
		}},
		{"calls open, pings past MinTime: no strike", pingPolicy{minTime: time.Second}, []step{
			{0, 1, false, false}, {time.Second, 1, false, false}, {2 * time.Second, 1, false, false}, {3 * time.Second, 1, false, false}, {4 * time.Second, 1, false, false},
		}},
		{"calls open, pings too soon", pingPolicy{minTime: time.Minute}, []step{
			{0, 1, false, false}, {time.Second, 1, false, false}, {2 * time.Second, 1, false, false}, {3 * time.Second, 1, false, true},
		}},
		{"answers sent between pings forgive the strikes", pingPolicy{minTime: time.Minute}, []step{
			{0, 1, false, false}, {time.Second, 1, false, false}, {2 * time.Second, 1, false, false}, {3 * time.Second, 1, true, false}, {4 * time.Second, 1, false, false}, {5 * time.Second, 1, false, false},
		}},
		{"permitted without calls", pingPolicy{minTime: time.Second, permitWithoutCalls: true}, []step{
			{0, 0, false, false}, {time.Second, 0, false, false}, {2 * time.Second, 0, false, false}, {3 * time.Second, 0, false, false},
		}},
		{"the default MinTime is 5 minutes", pingPolicy{}, []step{
			{0, 1, false, false}, {4 * time.Minute, 1, false, false}, {8 * time.Minute, 1, false, false}, {12 * time.Minute, 1, false, true},
		}},
	} {
		p := tc.policy
		for i, s := range tc.steps {
			if s.forgive {
				p.forgive = true
			}
			if got := p.onPing(t0.Add(s.at), s.calls); got != s.tooMany {
				t.Errorf("%s: step %d: too many %v, want %v", tc.name, i, got, s.tooMany)
			}
		}
	}
}

// TestSettingsPolicy checks the SETTINGS bucket: a burst, then the rate.
func TestSettingsPolicy(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var p settingsPolicy
	for i := range settingsBurst {
		if p.onSettings(t0) {
			t.Fatalf("SETTINGS %d of a burst of %d refused", i+1, settingsBurst)
		}
	}
	if !p.onSettings(t0) {
		t.Fatal("a SETTINGS past the burst accepted")
	}
	// A second later, settingsPerSecond more are accepted, and no more.
	now := t0.Add(time.Second)
	p = settingsPolicy{used: settingsBurst, at: t0}
	for i := range settingsPerSecond {
		if p.onSettings(now) {
			t.Fatalf("SETTINGS %d a second after the burst refused", i+1)
		}
	}
	if !p.onSettings(now) {
		t.Fatal("more SETTINGS than the rate accepted")
	}
}

// TestClosedStreams checks the ring of the streams closed last.
func TestClosedStreams(t *testing.T) {
	var g closedStreams
	if found, _ := g.find(0); found {
		t.Fatal("stream 0 found in an empty ring")
	}
	g.add(1, true)
	g.add(3, false)
	if found, byUs := g.find(1); !found || !byUs {
		t.Fatalf("stream 1: %v %v", found, byUs)
	}
	if found, byUs := g.find(3); !found || byUs {
		t.Fatalf("stream 3: %v %v", found, byUs)
	}
	for id := uint32(5); id < 5+2*uint32(len(g.ids)); id += 2 {
		g.add(id, false)
	}
	if found, _ := g.find(1); found {
		t.Fatal("stream 1 still found after the ring went round")
	}
}
