package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// startTestReplica starts one replica with the default settings on a
// datastore of its own; the limiters close when the test ends.
func startTestReplica(t *testing.T, ctx context.Context) (config, *Datastore, *replica) {
	t.Helper()
	cfg := defaultConfig()
	cfg.replicas = 1
	ds := newDatastore(cfg.budget, 0)
	lims, err := newLimiters(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lims.close)
	r, err := startReplica(ctx, cfg, "r1", 0, ds, lims, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return cfg, ds, r
}

// TestReplicaHTTP drives one replica with the library over its HTTP API:
// a job is answered once all its records are written, and /stats and
// /metrics report what happened.
func TestReplicaHTTP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg, ds, r := startTestReplica(t, ctx)
	defer r.stop(ctx)

	var res jobResult
	post(t, r.url()+"/ingest", `{"records": 1000, "ru_per_record": 10}`, http.StatusOK, &res)
	if res.Written != 1000 || res.Failed != 0 || res.Throttled != 0 || res.Seconds <= 0 {
		t.Errorf("job result %+v, want 1000 written in a positive time, none failed or throttled", res)
	}
	if got := ds.Total(); got.AcceptedRU != 10000 {
		t.Errorf("datastore accepted %d RU, want 10000", got.AcceptedRU)
	}
	var st replicaStats
	get(t, r.url()+"/stats", &st)
	if st.AcceptedRU != 10000 || st.Outstanding != 0 || st.Capacity < cfg.reserve() {
		t.Errorf("stats %+v, want 10000 RU accepted, nothing outstanding, capacity at least %d", st, cfg.reserve())
	}
	metrics := get(t, r.url()+"/metrics", nil)
	for _, want := range []string{
		`batcher_operations_released_total{replica="r1"} 1000`,
		`batcher_limiter_capacity{replica="r1"}`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	post(t, r.url()+"/ingest", `{"records": -1}`, http.StatusBadRequest, nil)
}

// TestRemoteStore checks the datastore served over HTTP: a client in
// another process sees acceptance and 429s with the retry-after.
func TestRemoteStore(t *testing.T) {
	ds := newDatastore(1000, 0)
	at := ds.Start().Add(250 * time.Millisecond)
	ds.now = func() time.Time { return at }
	srv := httptest.NewServer(datastoreHandler(ds))
	defer srv.Close()
	st := newRemoteStore(srv.URL)
	ctx := context.Background()
	if retry, err := st.Write(ctx, "pod-a", 800, false); err != nil || retry != 0 {
		t.Fatalf("first write: retry %v err %v, want accepted", retry, err)
	}
	retry, err := st.Write(ctx, "pod-b", 300, true)
	if err != nil || retry < 750*time.Millisecond || retry > 752*time.Millisecond {
		t.Fatalf("second write: retry %v err %v, want a 429 with about 750 ms", retry, err)
	}
	by, _ := ds.Window(0)
	if by["pod-a"].AcceptedRU != 800 || by["pod-b"].Throttled != 1 || by["pod-b"].InteractiveThrottled != 1 {
		t.Errorf("window 0 %+v, want pod-a 800 RU accepted and pod-b's interactive request throttled once", by)
	}
}

// post sends body to url, checks the status and decodes the answer into
// out when it is not nil.
func post(t *testing.T, url, body string, status int, out any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != status {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s: %s (%s), want %d", url, resp.Status, b, status)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
}

// get fetches url, decodes it into out when not nil, and returns the body.
func get(t *testing.T, url string, out any) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatal(err)
		}
	}
	return string(b)
}

// A replica stopped while a job runs answers the job's client before it
// closes the connection: 503 with what was written, not an empty reply
// (the job below needs 500 s at the budget; the stop leaves it 300 ms).
func TestReplicaStopAnswersRunningJobs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, _, r := startTestReplica(t, ctx)
	type answer struct {
		status int
		res    jobResult
		err    error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := http.Post(r.url()+"/ingest", "application/json", strings.NewReader(`{"records": 1000000, "ru_per_record": 10}`))
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		var a answer
		a.status, a.err = resp.StatusCode, json.NewDecoder(resp.Body).Decode(&a.res)
		done <- a
	}()
	for r.outstanding.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	stopCtx, stopCancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer stopCancel()
	r.stop(stopCtx)
	a := <-done
	if a.err != nil || a.status != http.StatusServiceUnavailable {
		t.Fatalf("the running job's client got status %d, %v; want 503 with the job's result", a.status, a.err)
	}
	if a.res.Written < 0 || a.res.Written >= 1000000 || !a.res.Finished.IsZero() {
		t.Fatalf("result %+v: want what was written of the job, and no finish time", a.res)
	}
}
