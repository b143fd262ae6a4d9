package prometheus

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/costwise/batcher"
)

// StatsFunc returns the snapshot a StatsHandler serves under one name. Its
// result must encode as JSON.
type StatsFunc func() interface{}

// BatcherStats returns a StatsFunc that serves src's Stats with snake_case
// keys (see BatcherView).
func BatcherStats(src BatcherSource) StatsFunc {
	return func() interface{} { return NewBatcherView(src.Stats()) }
}

// LimiterStats returns a StatsFunc that serves rl's capacity and, when rl is
// a SharedSource, its partitions and lease counters (see LimiterView).
func LimiterStats(rl batcher.RateLimiter) StatsFunc {
	return func() interface{} { return NewLimiterView(rl) }
}

// StatsHandler returns an http.Handler that answers GET and HEAD with a JSON
// object holding, for each name in sources, the snapshot its StatsFunc
// returns at the time of the request, for health and debug endpoints. The
// map is read on every request and must not change afterwards. The handler
// is safe for concurrent use.
func StatsHandler(sources map[string]StatsFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		out := make(map[string]interface{}, len(sources))
		for name, f := range sources {
			out[name] = f()
		}
		body, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			http.Error(w, "batcher: encoding stats: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			_, _ = w.Write(append(body, '\n'))
		}
	})
}

// BatcherView is the JSON form of batcher.BatcherStats served by
// StatsHandler. LastRelease is omitted before the first release.
type BatcherView struct {
	Running         bool              `json:"running"`
	Paused          bool              `json:"paused"`
	Enqueued        uint64            `json:"enqueued"`
	Rejected        map[string]uint64 `json:"rejected"`
	Released        uint64            `json:"released"`
	CostReleased    uint64            `json:"cost_released"`
	Batches         uint64            `json:"batches"`
	Buffered        uint32            `json:"buffered"`
	Target          uint32            `json:"target"`
	Inflight        uint32            `json:"inflight"`
	ConfiguredLimit uint32            `json:"inflight_limit,omitempty"`
	RateLimited     bool              `json:"rate_limited"`
	Capacity        uint32            `json:"capacity"`
	MaxCapacity     uint32            `json:"max_capacity"`
	Pauses          uint64            `json:"pauses"`
	PausedSeconds   float64           `json:"paused_seconds"`
	Audits          map[string]uint64 `json:"audits"`
	LastRelease     *time.Time        `json:"last_release,omitempty"`
}

// NewBatcherView converts a batcher snapshot to its JSON form.
func NewBatcherView(s batcher.BatcherStats) BatcherView {
	v := BatcherView{
		Running: s.Running, Paused: s.Paused,
		Enqueued: s.Enqueued, Rejected: s.Rejected, Released: s.Released,
		CostReleased: s.CostReleased, Batches: s.Batches,
		Buffered: s.Buffered, Target: s.Target, Inflight: s.Inflight,
		ConfiguredLimit: s.ConfiguredLimit, RateLimited: s.RateLimited,
		Capacity: s.Capacity, MaxCapacity: s.MaxCapacity,
		Pauses: s.Pauses, PausedSeconds: s.PausedSeconds,
		Audits: map[string]uint64{"pass": s.AuditPass, "fail": s.AuditFail, "skip": s.AuditSkip},
	}
	if !s.LastRelease.IsZero() {
		t := s.LastRelease.UTC()
		v.LastRelease = &t
	}
	return v
}

// LimiterView is the JSON form of a rate limiter served by StatsHandler;
// Shared is present only for a SharedSource.
type LimiterView struct {
	Capacity    uint32      `json:"capacity"`
	MaxCapacity uint32      `json:"max_capacity"`
	Shared      *SharedView `json:"shared,omitempty"`
}

// SharedView is the JSON form of batcher.SharedStats.
type SharedView struct {
	Owner           string `json:"owner"`
	Partitions      int    `json:"partitions"`
	Held            int    `json:"held"`
	Demand          int    `json:"demand"`
	Share           int    `json:"share"`
	Acquisitions    uint64 `json:"lease_acquisitions"`
	Conflicts       uint64 `json:"lease_conflicts"`
	Renewals        uint64 `json:"lease_renewals"`
	Releases        uint64 `json:"lease_releases"`
	StorageCalls    uint64 `json:"storage_calls"`
	StorageFailures uint64 `json:"storage_errors"`
	Errors          uint64 `json:"errors"`
}

// NewLimiterView reads rl's state into its JSON form.
func NewLimiterView(rl batcher.RateLimiter) LimiterView {
	v := LimiterView{Capacity: rl.Capacity(), MaxCapacity: rl.MaxCapacity()}
	if src, ok := rl.(SharedSource); ok {
		s := src.Stats()
		v.Capacity = s.Capacity
		v.Shared = &SharedView{
			Owner: s.Owner, Partitions: s.Partitions, Held: s.Held, Demand: s.Demand, Share: s.Share,
			Acquisitions: s.Acquisitions, Conflicts: s.Conflicts, Renewals: s.Renewals, Releases: s.Releases,
			StorageCalls: s.StorageCalls, StorageFailures: s.StorageFailures, Errors: s.Errors,
		}
	}
	return v
}
