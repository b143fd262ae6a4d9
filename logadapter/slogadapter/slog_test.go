package slogadapter_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/batchertest"
	"github.com/costwise/batcher/internal/jsonlines"
	"github.com/costwise/batcher/logadapter"
	"github.com/costwise/batcher/logadapter/slogadapter"
)

// syncBuffer is a bytes.Buffer safe for the batcher's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func jsonLogger(w *syncBuffer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}

var levels = map[logadapter.Level]string{
	logadapter.Debug: "DEBUG", logadapter.Info: "INFO", logadapter.Warn: "WARN", logadapter.Error: "ERROR",
}

func TestLevels(t *testing.T) {
	events := []string{
		batcher.ErrorEvent, batcher.AuditFailEvent, batcher.PauseEvent, batcher.ResumeEvent,
		batcher.ShutdownEvent, batcher.CreatedBlobEvent, batcher.VerifiedContainerEvent,
		batcher.FailedEvent, batcher.AllocatedEvent, batcher.ReleasedEvent, batcher.RequestEvent,
		batcher.BatchEvent, batcher.TargetEvent, batcher.CapacityEvent, batcher.AuditPassEvent,
		batcher.AuditSkipEvent,
	}
	var out syncBuffer
	l := slogadapter.Listener(jsonLogger(&out, slog.LevelDebug), "orders")
	for i, e := range events {
		l(e, i, "", nil)
	}
	recs := jsonlines.Parse(t, out.String())
	if len(recs) != len(events) {
		t.Fatalf("%d records for %d events", len(recs), len(events))
	}
	for i, r := range recs {
		want := levels[logadapter.LevelOf(events[i])]
		if r["level"] != want || r["event"] != events[i] || r["source"] != "orders" || r["val"] != float64(i) {
			t.Errorf("event %s: record %v, want level %s", events[i], r, want)
		}
		if r["msg"] != "batcher "+events[i] {
			t.Errorf("event %s: msg %v", events[i], r["msg"])
		}
	}
	if recs[0]["level"] != "ERROR" || recs[1]["level"] != "WARN" || recs[3]["level"] != "INFO" || recs[7]["level"] != "DEBUG" {
		t.Errorf("levels of error, audit-fail, resume, failed: %v %v %v %v",
			recs[0]["level"], recs[1]["level"], recs[3]["level"], recs[7]["level"])
	}
}

func TestLevelFilterAndError(t *testing.T) {
	var out syncBuffer
	l := slogadapter.Listener(jsonLogger(&out, slog.LevelInfo), "cosmos")
	l(batcher.CapacityEvent, 100, "", nil)
	l(batcher.ErrorEvent, 0, "batcher: renew: store down", errors.New("store down"))
	recs := jsonlines.Parse(t, out.String())
	if len(recs) != 1 {
		t.Fatalf("records %v, want only the error", recs)
	}
	if recs[0]["msg"] != "batcher: renew: store down" || recs[0]["err"] != "store down" || recs[0]["level"] != "ERROR" {
		t.Fatalf("record %v", recs[0])
	}
}

// A watcher that panics makes the batcher raise an error event with the
// batch as metadata: it is logged at error with the count, without the
// operations' payloads.
func TestPanickingWatcherLogsWithoutPayload(t *testing.T) {
	var out syncBuffer
	fc := batchertest.NewFakeClock(time.Time{})
	b := batcher.New(10).WithClock(fc)
	b.WithEmitBatch()
	b.AddListener(slogadapter.Listener(jsonLogger(&out, slog.LevelDebug), "orders"))
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	w := batcher.NewWatcher(func([]batcher.IOperation) { panic("boom") }).WithMaxBatchSize(2)
	for i := 0; i < 2; i++ {
		if err := b.Enqueue(batcher.NewOperation(w, 1, "secret-payload", true)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), `"level":"ERROR"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no error record in %s", out.String())
		}
		time.Sleep(time.Millisecond)
	}
	if strings.Contains(out.String(), "secret-payload") {
		t.Fatalf("payload logged: %s", out.String())
	}
	var sawBatch bool
	for _, r := range jsonlines.Parse(t, out.String()) {
		if r["event"] == batcher.BatchEvent {
			sawBatch = r["val"] == float64(2) && r["level"] == "DEBUG"
		}
		if r["event"] == batcher.ErrorEvent && (r["val"] != float64(2) || !strings.Contains(r["msg"].(string), "boom")) {
			t.Fatalf("error record %v", r)
		}
	}
	if !sawBatch {
		t.Fatalf("no debug batch record of 2 operations in %s", out.String())
	}
}

func TestNilLoggerUsesDefault(t *testing.T) {
	var out syncBuffer
	prev := slog.Default()
	slog.SetDefault(jsonLogger(&out, slog.LevelDebug))
	defer slog.SetDefault(prev)
	slogadapter.Listener(nil, "x")(batcher.ShutdownEvent, 0, "", nil)
	if recs := jsonlines.Parse(t, out.String()); len(recs) != 1 || recs[0]["level"] != "INFO" {
		t.Fatalf("records %v", recs)
	}
}
