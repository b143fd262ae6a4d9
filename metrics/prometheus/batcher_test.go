package prometheus_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/batchertest"
	batcherprom "github.com/costwise/batcher/metrics/prometheus"
)

// startInstrumented returns a started batcher on a fake clock, registered on
// a fresh pedantic registry, and the recorder of its events.
func startInstrumented(t *testing.T, opts batcherprom.Options) (*batcher.Batcher, *batchertest.FakeClock, *prom.Registry, *batchertest.Recorder) {
	t.Helper()
	fc := batchertest.NewFakeClock(time.Time{})
	b := batcher.New(batcher.DefaultBufferSize).WithClock(fc)
	reg := prom.NewPedanticRegistry()
	if _, err := batcherprom.Register(reg, b, opts); err != nil {
		t.Fatalf("Register: %v", err)
	}
	rec := batchertest.NewRecorder()
	b.AddListener(rec.Listener())
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	return b, fc, reg, rec
}

// The scenario: four operations of cost 2 for a watcher taking batches of
// three, one nil operation, a flush tick, then a pause. Every metric must
// show exactly that.
func TestBatcherMetricsFollowScenario(t *testing.T) {
	opts := batcherprom.Options{
		ConstLabels: prom.Labels{"name": "orders"},
		SizeBuckets: []float64{1, 3, 10},
		WaitBuckets: []float64{0.05, 0.5},
	}
	b, fc, reg, rec := startInstrumented(t, opts)
	var done atomic.Int64
	w := batcher.NewWatcher(func(ops []batcher.IOperation) { done.Add(int64(len(ops))) }).WithMaxBatchSize(3)
	for i := 0; i < 4; i++ {
		if err := b.Enqueue(batcher.NewOperation(w, 2, i, true)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Enqueue(nil); err == nil {
		t.Fatal("Enqueue(nil) succeeded")
	}
	eventually(t, "the full batch", func() bool { return done.Load() == 3 })
	fc.Advance(100 * time.Millisecond) // the flush tick releases the fourth
	eventually(t, "every batch done", func() bool {
		s := b.Stats()
		return done.Load() == 4 && s.Target == 0 && s.Inflight == 0
	})
	b.Pause()
	if _, ok := rec.WaitFor(ctxTimeout(t), batcher.PauseEvent, 1); !ok {
		t.Fatal("no pause event")
	}

	err := testutil.GatherAndCompare(reg, strings.NewReader(scenarioMetrics), scenarioNames...)
	if err != nil {
		t.Fatal(err)
	}
	if v := mustSample(t, reg, "batcher_last_release_timestamp_seconds"); v != 1704067200.1 {
		t.Fatalf("last release %v, want 1704067200.1 (fake start + 100 ms)", v)
	}

	b.Stop()
	var stopped batcher.BatcherStoppedError
	if err := b.Enqueue(batcher.NewOperation(w, 1, nil, true)); !errors.As(err, &stopped) {
		t.Fatalf("Enqueue after Stop: %v", err)
	}
	if v := mustSample(t, reg, "batcher_running"); v != 0 {
		t.Fatalf("running %v after Stop, want 0", v)
	}
	if v := mustSample(t, reg, "batcher_operations_rejected_total", "reason", "stopped"); v != 1 {
		t.Fatalf("rejected{stopped} %v, want 1", v)
	}
}

// A backlog waits at capacity 0 for 10 s, most of it in the hand-over to
// the batcher's loop (5,000 operations; the blocked loop holds about a
// thousand): every batch's wait must count those 10 s, as the histogram's
// help promises (from Enqueue to release).
func TestBatchWaitCountsBacklog(t *testing.T) {
	fc := batchertest.NewFakeClock(time.Time{})
	rl := batcher.NewProvisionedResource(1000)
	rl.SetCapacity(0)
	b := batcher.New(batcher.DefaultBufferSize).WithClock(fc)
	b.WithRateLimiter(rl)
	reg := prom.NewPedanticRegistry()
	if _, err := batcherprom.Register(reg, b, batcherprom.Options{WaitBuckets: []float64{9.9}}); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	var done atomic.Int64
	w := batcher.NewWatcher(func(ops []batcher.IOperation) { done.Add(int64(len(ops))) }).WithMaxBatchSize(100)
	const n = 5000
	for i := 0; i < n; i++ {
		if err := b.Enqueue(batcher.NewOperation(w, 1, i, true)); err != nil {
			t.Fatal(err)
		}
	}
	fc.Advance(10 * time.Second)
	rl.SetCapacity(1_000_000)
	for i := 0; done.Load() < n; i++ {
		if i == 50 {
			t.Fatalf("%d of %d released after 5 s of capacity", done.Load(), n)
		}
		prev := done.Load()
		fc.Advance(100 * time.Millisecond)
		eventually(t, "a release", func() bool { got := done.Load(); return got > prev || got == n })
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "batcher_batch_wait_seconds" {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		if short := h.GetBucket()[0].GetCumulativeCount(); short != 0 || h.GetSampleCount() < n/100 {
			t.Fatalf("%d of %d batches waited under 9.9 s (want none, and at least %d batches)", short, h.GetSampleCount(), n/100)
		}
		return
	}
	t.Fatal("batcher_batch_wait_seconds not gathered")
}

var scenarioNames = []string{
	"batcher_operations_enqueued_total", "batcher_operations_rejected_total",
	"batcher_operations_released_total", "batcher_cost_released_total", "batcher_batches_released_total",
	"batcher_buffered_operations", "batcher_target", "batcher_inflight_batches", "batcher_inflight_batches_limit",
	"batcher_capacity", "batcher_max_capacity", "batcher_paused", "batcher_pauses_total",
	"batcher_paused_seconds_total", "batcher_audits_total", "batcher_running",
	"batcher_batch_operations", "batcher_batch_wait_seconds",
}

// scenarioMetrics is what the scenario must leave. Capacity and the
// in-flight limit are absent: the batcher has neither a rate limiter nor a
// limit. The waits are 0 (the full batch) and 100 ms (the flushed one).
const scenarioMetrics = `
# HELP batcher_operations_enqueued_total Operations accepted by Enqueue.
# TYPE batcher_operations_enqueued_total counter
batcher_operations_enqueued_total{name="orders"} 4
# HELP batcher_operations_rejected_total Operations refused by Enqueue, by reason.
# TYPE batcher_operations_rejected_total counter
batcher_operations_rejected_total{name="orders",reason="buffer_full"} 0
batcher_operations_rejected_total{name="orders",reason="buffer_not_allocated"} 0
batcher_operations_rejected_total{name="orders",reason="context"} 0
batcher_operations_rejected_total{name="orders",reason="no_operation"} 1
batcher_operations_rejected_total{name="orders",reason="no_watcher"} 0
batcher_operations_rejected_total{name="orders",reason="stopped"} 0
batcher_operations_rejected_total{name="orders",reason="too_expensive"} 0
batcher_operations_rejected_total{name="orders",reason="too_many_attempts"} 0
# HELP batcher_operations_released_total Operations handed to watchers.
# TYPE batcher_operations_released_total counter
batcher_operations_released_total{name="orders"} 4
# HELP batcher_cost_released_total Total cost of the operations handed to watchers.
# TYPE batcher_cost_released_total counter
batcher_cost_released_total{name="orders"} 8
# HELP batcher_batches_released_total Batches handed to watchers.
# TYPE batcher_batches_released_total counter
batcher_batches_released_total{name="orders"} 2
# HELP batcher_buffered_operations Accepted operations not yet released (buffer depth).
# TYPE batcher_buffered_operations gauge
batcher_buffered_operations{name="orders"} 0
# HELP batcher_target Cost of accepted operations whose batches are not done: the capacity the batcher asks for.
# TYPE batcher_target gauge
batcher_target{name="orders"} 0
# HELP batcher_inflight_batches Watcher callbacks running now.
# TYPE batcher_inflight_batches gauge
batcher_inflight_batches{name="orders"} 0
# HELP batcher_paused 1 while a pause is in force, else 0.
# TYPE batcher_paused gauge
batcher_paused{name="orders"} 1
# HELP batcher_pauses_total Pauses started or lengthened.
# TYPE batcher_pauses_total counter
batcher_pauses_total{name="orders"} 1
# HELP batcher_paused_seconds_total Total length of the pauses applied.
# TYPE batcher_paused_seconds_total counter
batcher_paused_seconds_total{name="orders"} 0.5
# HELP batcher_audits_total Audits of the target, by result (pass, fail, skip).
# TYPE batcher_audits_total counter
batcher_audits_total{name="orders",result="fail"} 0
batcher_audits_total{name="orders",result="pass"} 0
batcher_audits_total{name="orders",result="skip"} 0
# HELP batcher_running 1 between Start and Stop, else 0.
# TYPE batcher_running gauge
batcher_running{name="orders"} 1
# HELP batcher_batch_operations Operations per released batch.
# TYPE batcher_batch_operations histogram
batcher_batch_operations_bucket{name="orders",le="1"} 1
batcher_batch_operations_bucket{name="orders",le="3"} 2
batcher_batch_operations_bucket{name="orders",le="10"} 2
batcher_batch_operations_bucket{name="orders",le="+Inf"} 2
batcher_batch_operations_sum{name="orders"} 4
batcher_batch_operations_count{name="orders"} 2
# HELP batcher_batch_wait_seconds Time the oldest operation of each released batch waited between Enqueue and release.
# TYPE batcher_batch_wait_seconds histogram
batcher_batch_wait_seconds_bucket{name="orders",le="0.05"} 1
batcher_batch_wait_seconds_bucket{name="orders",le="0.5"} 2
batcher_batch_wait_seconds_bucket{name="orders",le="+Inf"} 2
batcher_batch_wait_seconds_sum{name="orders"} 0.1
batcher_batch_wait_seconds_count{name="orders"} 2
`

func ctxTimeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// stubBatcher serves a fixed snapshot.
type stubBatcher struct{ s batcher.BatcherStats }

func (s stubBatcher) Stats() batcher.BatcherStats { return s.s }

// Every field of the snapshot that has a metric must reach it, including
// the ones the scenario leaves at zero or absent.
func TestBatcherCollectorMapsEveryField(t *testing.T) {
	last := time.Date(2024, 5, 1, 12, 0, 0, 250e6, time.UTC)
	src := stubBatcher{batcher.BatcherStats{
		Enqueued: 10, Rejected: map[string]uint64{"buffer_full": 3, "context": 2}, Released: 7,
		CostReleased: 70, Batches: 3, Buffered: 3, Target: 30, Inflight: 2,
		Capacity: 400, MaxCapacity: 1000, Paused: false, Pauses: 4, PausedSeconds: 3.5,
		AuditPass: 5, AuditFail: 1, AuditSkip: 6, LastRelease: last,
		Running: true, RateLimited: true, ConfiguredLimit: 8,
	}}
	reg := prom.NewPedanticRegistry()
	reg.MustRegister(batcherprom.NewBatcherCollector(src, batcherprom.Options{Namespace: "svc"}))
	want := map[string]float64{
		"svc_operations_enqueued_total": 10, "svc_operations_released_total": 7,
		"svc_cost_released_total": 70, "svc_batches_released_total": 3,
		"svc_buffered_operations": 3, "svc_target": 30, "svc_inflight_batches": 2,
		"svc_inflight_batches_limit": 8, "svc_capacity": 400, "svc_max_capacity": 1000,
		"svc_paused": 0, "svc_pauses_total": 4, "svc_paused_seconds_total": 3.5, "svc_running": 1,
		"svc_last_release_timestamp_seconds": float64(last.UnixNano()) / 1e9,
	}
	for name, v := range want {
		if got := mustSample(t, reg, name); got != v {
			t.Errorf("%s = %v, want %v", name, got, v)
		}
	}
	for labels, v := range map[[2]string]float64{
		{"reason", "buffer_full"}: 3, {"reason", "context"}: 2, {"reason", "no_watcher"}: 0,
	} {
		if got := mustSample(t, reg, "svc_operations_rejected_total", labels[0], labels[1]); got != v {
			t.Errorf("rejected%v = %v, want %v", labels, got, v)
		}
	}
	for result, v := range map[string]float64{"pass": 5, "fail": 1, "skip": 6} {
		if got := mustSample(t, reg, "svc_audits_total", "result", result); got != v {
			t.Errorf("audits{%s} = %v, want %v", result, got, v)
		}
	}
}

func TestBatcherCollectorLint(t *testing.T) {
	c := batcherprom.NewBatcherCollector(stubBatcher{batcher.BatcherStats{
		RateLimited: true, ConfiguredLimit: 1, LastRelease: time.Unix(1, 0),
	}}, batcherprom.Options{})
	c.ObserveBatch(5, 5, time.Millisecond)
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	if n := testutil.CollectAndCount(c); n != 8+3+18 {
		t.Fatalf("collected %d metrics, want 29 (8 rejected reasons, 3 audit results, 18 others)", n)
	}
}

// Two batchers on one registry need different constant labels; the same
// labels twice is an error, not a panic.
func TestRegisterTwoBatchers(t *testing.T) {
	reg := prom.NewRegistry()
	for _, name := range []string{"orders", "invoices"} {
		b := batcher.New(10)
		if _, err := batcherprom.Register(reg, b, batcherprom.Options{ConstLabels: prom.Labels{"name": name}}); err != nil {
			t.Fatalf("Register %s: %v", name, err)
		}
	}
	b := batcher.New(10)
	var dup prom.AlreadyRegisteredError
	if _, err := batcherprom.Register(reg, b, batcherprom.Options{ConstLabels: prom.Labels{"name": "orders"}}); !errors.As(err, &dup) {
		t.Fatalf("registering orders twice: %v, want AlreadyRegisteredError", err)
	}
	if _, err := batcherprom.Register(reg, b, batcherprom.Options{}); err == nil {
		t.Fatal("registering without labels beside labelled collectors succeeded")
	}
}

func TestRegisterAfterStart(t *testing.T) {
	b := batcher.New(10)
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	reg := prom.NewRegistry()
	if _, err := batcherprom.Register(reg, b, batcherprom.Options{}); !errors.Is(err, batcherprom.ErrStarted) {
		t.Fatalf("Register on a running batcher: %v, want ErrStarted", err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Fatalf("registry holds %d metrics (%v) after a refused Register", n, err)
	}
}
