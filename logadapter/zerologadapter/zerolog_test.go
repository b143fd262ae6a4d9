package zerologadapter_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/internal/jsonlines"
	"github.com/costwise/batcher/logadapter"
	"github.com/costwise/batcher/logadapter/zerologadapter"
)

func TestLevels(t *testing.T) {
	events := []string{
		batcher.ErrorEvent, batcher.AuditFailEvent, batcher.PauseEvent, batcher.ResumeEvent,
		batcher.ShutdownEvent, batcher.CreatedContainerEvent, batcher.VerifiedBlobEvent,
		batcher.FailedEvent, batcher.AllocatedEvent, batcher.ReleasedEvent, batcher.RequestEvent,
		batcher.BatchEvent, batcher.TargetEvent, batcher.CapacityEvent, batcher.AuditPassEvent,
		batcher.AuditSkipEvent,
	}
	var out bytes.Buffer
	l := zerologadapter.Listener(zerolog.New(&out).Level(zerolog.DebugLevel), "orders")
	for i, e := range events {
		l(e, i, "", []batcher.IOperation{batcher.NewOperation(nil, 1, "secret-payload", true)})
	}
	recs := jsonlines.Parse(t, out.String())
	if len(recs) != len(events) {
		t.Fatalf("%d records for %d events", len(recs), len(events))
	}
	for i, r := range recs {
		want := zerologadapter.Level(logadapter.LevelOf(events[i])).String()
		if r["level"] != want || r["event"] != events[i] || r["source"] != "orders" || r["val"] != float64(i) ||
			r["message"] != "batcher "+events[i] {
			t.Errorf("event %s: record %v, want level %s", events[i], r, want)
		}
	}
	if recs[0]["level"] != "error" || recs[2]["level"] != "warn" || recs[4]["level"] != "info" || recs[11]["level"] != "debug" {
		t.Errorf("levels of error, pause, shutdown, batch: %v %v %v %v",
			recs[0]["level"], recs[2]["level"], recs[4]["level"], recs[11]["level"])
	}
	if strings.Contains(out.String(), "secret-payload") {
		t.Fatalf("metadata logged: %s", out.String())
	}
}

func TestLevelFilterAndError(t *testing.T) {
	var out bytes.Buffer
	l := zerologadapter.Listener(zerolog.New(&out).Level(zerolog.WarnLevel), "cosmos")
	l(batcher.ShutdownEvent, 0, "", nil)
	l(batcher.RequestEvent, 7, "", nil)
	l(batcher.ErrorEvent, 0, "batcher: renew: store down", errors.New("store down"))
	recs := jsonlines.Parse(t, out.String())
	if len(recs) != 1 {
		t.Fatalf("records %v, want only the error", recs)
	}
	r := recs[0]
	if r["level"] != "error" || r["message"] != "batcher: renew: store down" || r["error"] != "store down" {
		t.Fatalf("record %v", r)
	}
}

// A real resource's lifecycle: capacity at debug, shutdown at info; at the
// info level only the shutdown remains.
func TestProvisionedResourceEvents(t *testing.T) {
	var out bytes.Buffer
	r := batcher.NewProvisionedResource(10)
	r.AddListener(zerologadapter.Listener(zerolog.New(&out).Level(zerolog.InfoLevel), "provisioned"))
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.SetCapacity(20)
	r.Stop()
	recs := jsonlines.Parse(t, out.String())
	if len(recs) != 1 || recs[0]["event"] != batcher.ShutdownEvent || recs[0]["level"] != "info" ||
		recs[0]["source"] != "provisioned" {
		t.Fatalf("records %v, want the shutdown only", recs)
	}
}
