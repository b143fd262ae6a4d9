package main

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/costwise/batcher"
	"github.com/google/uuid"
	"github.com/rs/zerolog"
)

// fakeShared is a sharedLimiter of fixed capacity that records GiveMe.
type fakeShared struct {
	capacity uint32
	asked    uint32
}

func (f *fakeShared) Provision(context.Context) error { return nil }
func (f *fakeShared) MaxCapacity() uint32             { return f.capacity }
func (f *fakeShared) Capacity() uint32                { return f.capacity }
func (f *fakeShared) GiveMe(target uint32)            { f.asked = target }
func (f *fakeShared) Start(context.Context) error     { return nil }
func (f *fakeShared) Stop()                           {}
func (f *fakeShared) Stats() batcher.SharedStats      { return batcher.SharedStats{} }
func (f *fakeShared) AddListener(func(string, int, string, interface{})) uuid.UUID {
	return uuid.Nil
}

// TestMeteredLimiter steps the meter on a fake clock: a user request's RU
// lower the capacity the batcher sees by RU/meterWindow per second for
// exactly meterWindow, a 429's retry-after holds it at zero, and GiveMe
// asks for the backlog within drainTime plus the users' rate.
func TestMeteredLimiter(t *testing.T) {
	inner := &fakeShared{capacity: 1000}
	m := newMeteredLimiter(inner)
	t0 := time.Unix(1_700_000_000, 0)
	now := t0
	m.now = func() time.Time { return now }
	steps := []struct {
		at     time.Duration
		charge uint32
		hold   time.Duration
		want   uint32
	}{
		{0, 0, 0, 1000},
		{10 * time.Millisecond, 5, 0, 950}, // 5 RU over 100 ms: 50 RU/s
		{60 * time.Millisecond, 20, 0, 750},
		{109 * time.Millisecond, 0, 0, 750},
		{110 * time.Millisecond, 0, 0, 800}, // the first charge has run out
		{159 * time.Millisecond, 0, 0, 800},
		{160 * time.Millisecond, 0, 0, 1000},
		{170 * time.Millisecond, 200, 0, 0}, // more than the capacity: zero, not less
		{300 * time.Millisecond, 0, 40 * time.Millisecond, 0},
		{339 * time.Millisecond, 0, 0, 0},
		{340 * time.Millisecond, 0, 0, 1000},
	}
	for i, s := range steps {
		now = t0.Add(s.at)
		if s.charge > 0 {
			m.charge(s.charge)
		}
		if s.hold > 0 {
			m.hold(s.hold)
		}
		if got := m.Capacity(); got != s.want {
			t.Errorf("step %d (%v): capacity %d, want %d", i, s.at, got, s.want)
		}
		if m.held() != 1000 {
			t.Errorf("step %d: held %d, want the inner capacity", i, m.held())
		}
	}
	// 225 RU charged within the last second: 225 RU/s of users on top of
	// the backlog's 30 RU within 100 ms.
	m.GiveMe(30)
	if inner.asked != 300+225 {
		t.Errorf("GiveMe(30) asked for %d, want 525", inner.asked)
	}
	m.GiveMe(0)
	if inner.asked != 0 {
		t.Errorf("GiveMe(0) asked for %d, want 0: the reservation covers the users", inner.asked)
	}
	m.GiveMe(1 << 31)
	if inner.asked != 1<<32-1 {
		t.Errorf("GiveMe(2^31) asked for %d, want the largest uint32", inner.asked)
	}
}

// scriptedStore answers with the retry-afters of its script in turn, then
// accepts.
type scriptedStore struct {
	retries []time.Duration
	calls   int
}

func (s *scriptedStore) Write(ctx context.Context, _ string, _ uint32, _ bool) (time.Duration, error) {
	s.calls++
	if s.calls <= len(s.retries) {
		return s.retries[s.calls-1], nil
	}
	return 0, ctx.Err()
}

// TestSendWithRetries checks the SDK's retry budget: 9 retries, and no
// retry whose wait would take the waits past 30 s.
func TestSendWithRetries(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name      string
		retries   []time.Duration
		throttled int
		calls     int
		budget    bool // the retry budget ran out
	}{
		{"accepted", nil, 0, 1, false},
		{"three 429s", []time.Duration{ms, ms, ms}, 3, 4, false},
		{"nine 429s", []time.Duration{ms, ms, ms, ms, ms, ms, ms, ms, ms}, 9, 10, false},
		{"ten 429s", []time.Duration{ms, ms, ms, ms, ms, ms, ms, ms, ms, ms}, 10, 10, true},
		{"waits past 30 s", []time.Duration{ms, 31 * time.Second}, 2, 2, true},
	}
	for _, c := range cases {
		st := &scriptedStore{retries: c.retries}
		res := sendWithRetries(context.Background(), st, "r1", 5, true)
		if res.Throttled != c.throttled || st.calls != c.calls || errors.Is(res.Err, errRetryBudget) != c.budget ||
			(!c.budget && res.Err != nil) {
			t.Errorf("%s: %d throttled in %d calls, err %v; want %d in %d, budget exhausted %v",
				c.name, res.Throttled, st.calls, res.Err, c.throttled, c.calls, c.budget)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if res := sendWithRetries(ctx, &scriptedStore{retries: []time.Duration{time.Second}}, "r1", 5, true); !errors.Is(res.Err, context.Canceled) {
		t.Errorf("cancelled while waiting: err %v, want context.Canceled", res.Err)
	}
}

// TestUserStats checks the percentiles (nearest rank) and the counts.
func TestUserStats(t *testing.T) {
	var samples []userSample
	for i := 1; i <= 200; i++ {
		samples = append(samples, userSample{Latency: time.Duration(i) * time.Millisecond, Served: time.Duration(i) * time.Microsecond, Status: http.StatusOK})
	}
	samples[0].Throttled = 2
	samples = append(samples, userSample{Status: http.StatusTooManyRequests, Throttled: 10, Latency: time.Second}, userSample{})
	st := statsOf(samples)
	if st.Requests != 202 || st.Throttled != 2 || st.Retries != 12 || st.Failed != 2 {
		t.Errorf("counts %+v, want 202 requests, 2 throttled with 12 429s, 2 failed", st)
	}
	// 201 answered: 1..200 ms and the 429 after 1 s; rank ceil(0.99 × 201) = 199.
	if st.P50 != 101*time.Millisecond || st.P99 != 199*time.Millisecond || st.Max != time.Second || st.ServedP99 != 198*time.Microsecond {
		t.Errorf("p50 %v p99 %v max %v served p99 %v; want 101ms, 199ms, 1s, 198µs", st.P50, st.P99, st.Max, st.ServedP99)
	}
	if q := quantile(nil, 0.99); q != 0 {
		t.Errorf("quantile of nothing: %v", q)
	}
}

// TestSummaryRoom checks the utilisation of the room the users left: the
// bulk RU against the budget less the users' RU, window by window, over the
// part of each window the run covered.
func TestSummaryRoom(t *testing.T) {
	r := &runResult{Library: true, Budget: 1000, From: 500 * time.Millisecond, To: 2500 * time.Millisecond,
		Total: usage{AcceptedRU: 1900, InteractiveRU: 300}}
	for k, users := range []uint64{100, 200, 0} {
		r.Seconds = append(r.Seconds, second{K: k, RU: []uint64{0}, UserRU: []uint64{users}, Backlog: []bool{true}})
	}
	// Room: half of 900, all of 800, half of 1000 = 1750; bulk 1600.
	if s := summarise(r); s.BulkRU != 1600 || s.RoomUtil < 0.914 || s.RoomUtil > 0.915 || s.RoomSeconds != 2 {
		t.Errorf("summary %+v, want bulk 1600 RU, 91.4%% of 1750 RU of room over 2 s", s)
	}
}

// TestMonitorCatchesUp checks that a monitor stopped while it lags the
// clock still records every window up to the one in progress, the last as
// partial, so that no window of a run is missing from its figures.
func TestMonitorCatchesUp(t *testing.T) {
	m := &monitor{names: []string{"r1"}, budget: 1000, start: time.Now().Add(-3500 * time.Millisecond),
		log: zerolog.Nop(), keep: true, done: make(chan struct{}),
		window: func(k int, _ []string) []usage { return []usage{{AcceptedRU: uint64(k + 1), Requests: 1}} }}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m.run(ctx)
	if len(m.series) != 4 {
		t.Fatalf("%d windows recorded, want 4: %+v", len(m.series), m.series)
	}
	for k, s := range m.series {
		if s.K != k || s.RU[0] != uint64(k+1) || s.Partial != (k == 3) {
			t.Errorf("window %d: %+v, want K %d with %d RU, partial only for the last", k, s, k, k+1)
		}
	}
}
