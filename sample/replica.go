package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// ingester is how a replica gets a job's records into the datastore: with
// the library (libIngester) or as fast as it can (directIngester).
type ingester interface {
	// submit hands every record of j over; it returns early with an error
	// when ctx ends or the ingester stops, leaving the rest unsubmitted.
	submit(ctx context.Context, j *job) (submitted int, err error)
	// capacity returns the RU/s the replica may use now; 0 when unlimited.
	capacity() uint32
	// charge counts ru that one of the replica's user requests spent.
	charge(ru uint32)
	// shutdown finishes what was submitted, within ctx, and stops.
	shutdown(ctx context.Context)
}

// replica is one instance of the service: an HTTP server whose POST /ingest
// takes jobs and an ingester that writes their records to the datastore.
type replica struct {
	name  string
	cfg   config
	log   zerolog.Logger
	store store
	ing   ingester

	ctx    context.Context // ends when the replica stops for good
	cancel context.CancelFunc

	outstanding atomic.Int64  // records received and not yet written or failed
	acceptedRU  atomic.Uint64 // RU the datastore accepted from this replica's bulk jobs
	throttled   atomic.Uint64 // 429s the bulk jobs' requests received
	failed      atomic.Uint64 // records given up on
	seq         atomic.Int64

	userRU        atomic.Uint64 // RU the user requests spent
	userThrottled atomic.Uint64 // 429s the user requests met
	userFailed    atomic.Uint64 // user requests answered with an error

	srv     *http.Server
	ln      net.Listener
	metrics *prom.Registry // served on GET /metrics (metrics.go)
}

// newReplica returns a replica named name writing to st. Set its ingester,
// then call listen.
func newReplica(name string, cfg config, st store, log zerolog.Logger) *replica {
	ctx, cancel := context.WithCancel(context.Background())
	return &replica{name: name, cfg: cfg, store: st, ctx: ctx, cancel: cancel, metrics: prom.NewRegistry(),
		log: log.With().Str("replica", name).Logger()}
}

// listen serves the replica's HTTP API on 127.0.0.1:port (0: a free port).
func (r *replica) listen(port int) error {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("replica %s: %w", r.name, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /ingest", r.handleIngest)
	mux.HandleFunc("GET /stats", r.handleStats)
	mux.HandleFunc("GET /items/{id}", r.handleItem)
	mux.HandleFunc("PUT /items/{id}", r.handleItem)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	r.mountMetrics(mux)
	r.ln = ln
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := r.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.log.Error().Err(err).Msg("http server stopped")
		}
	}()
	r.log.Info().Str("url", r.url()).Msg("replica listening")
	return nil
}

// url returns the base URL of the replica's HTTP API.
func (r *replica) url() string { return "http://" + r.ln.Addr().String() }

// handleIngest takes a job, submits its records and answers with the job's
// timing once every record is written or given up on.
func (r *replica) handleIngest(w http.ResponseWriter, req *http.Request) {
	var in ingestRequest
	if err := json.NewDecoder(req.Body).Decode(&in); err != nil || in.Records < 0 || in.Records > 10_000_000 {
		http.Error(w, `body must be {"records": 0..10000000, "ru_per_record": n}`, http.StatusBadRequest)
		return
	}
	if in.RUPerItem == 0 {
		in.RUPerItem = r.cfg.cost
	}
	j := newJob(r.name, r.seq.Add(1), in.Records, in.RUPerItem)
	r.outstanding.Add(int64(in.Records))
	r.log.Info().Str("job", j.id).Int("records", in.Records).Uint32("ru_per_record", in.RUPerItem).Msg("job received")
	n, err := r.ing.submit(req.Context(), j)
	if err != nil {
		j.fail(err)
		r.settle(j, 0, in.Records-n, 0)
	}
	select {
	case <-j.done:
	case <-req.Context().Done():
		return
	case <-r.ctx.Done():
	}
	res := j.result()
	status := http.StatusOK
	if res.Finished.IsZero() {
		status = http.StatusServiceUnavailable
	}
	r.log.Info().Str("job", j.id).Int64("written", res.Written).Int64("failed", res.Failed).
		Int64("throttled", res.Throttled).Float64("seconds", res.Seconds).Msg("job done")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(res)
}

// settle books records of j as written (costing ru in total) or failed.
func (r *replica) settle(j *job, written, failed int, ru uint64) {
	r.acceptedRU.Add(ru)
	r.failed.Add(uint64(failed))
	r.outstanding.Add(-int64(written + failed))
	j.settle(written, failed)
}

// replicaStats is the answer to GET /stats.
type replicaStats struct {
	Name          string `json:"name"`
	Capacity      uint32 `json:"capacity"`
	Outstanding   int64  `json:"outstanding"`
	AcceptedRU    uint64 `json:"accepted_ru"`
	Throttled     uint64 `json:"throttled"`
	Failed        uint64 `json:"failed"`
	UserRU        uint64 `json:"user_ru"`
	UserThrottled uint64 `json:"user_throttled"`
	UserFailed    uint64 `json:"user_failed"`
}

func (r *replica) stats() replicaStats {
	return replicaStats{Name: r.name, Capacity: r.ing.capacity(), Outstanding: r.outstanding.Load(),
		AcceptedRU: r.acceptedRU.Load(), Throttled: r.throttled.Load(), Failed: r.failed.Load(),
		UserRU: r.userRU.Load(), UserThrottled: r.userThrottled.Load(), UserFailed: r.userFailed.Load()}
}

func (r *replica) handleStats(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(r.stats())
}

// stop shuts the replica down: it stops taking jobs, lets running ones
// finish within ctx, then ends whatever is left.
func (r *replica) stop(ctx context.Context) {
	if r.srv != nil {
		if err := r.srv.Shutdown(ctx); err != nil {
			r.log.Warn().Err(err).Msg("jobs still running at shutdown")
		}
	}
	r.ing.shutdown(ctx)
	r.cancel()
	// The jobs still running answer now, 503 with what they wrote, and
	// their connections close once the answers are out; a client that
	// stops reading is not waited for past a second.
	if r.srv != nil {
		answered, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = r.srv.Shutdown(answered)
		cancel()
		_ = r.srv.Close()
	}
}
