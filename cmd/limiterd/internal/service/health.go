package service

import (
	"net/http"
	"sync"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// healthState is envoyproxy/ratelimit's health: healthy unless the service
// is stopping or, with envoy.healthy_with_at_least_one_config_loaded, the
// rules in force name no domain (none loaded yet, from files or xDS, or
// the last good load was empty). GET /healthcheck answers it (200 "OK",
// else 500), and the gRPC health service follows it for the whole server
// ("") and for "ratelimit", the service name envoyproxy/ratelimit reports.
type healthState struct {
	grpc      *health.Server
	needRules bool

	mu       sync.Mutex // orders the updates of grpc
	rules    bool       // the rules in force name a domain; guarded by mu
	stopping bool       // guarded by mu
	ok       bool       // guarded by mu
}

// healthService is the gRPC health service name envoyproxy/ratelimit sets.
const healthService = "ratelimit"

func newHealthState(g *health.Server, needRules bool) *healthState {
	h := &healthState{grpc: g, needRules: needRules}
	h.update(func() {})
	return h
}

// rulesLoaded records whether the rules now in force name a domain.
func (h *healthState) rulesLoaded(any bool) { h.update(func() { h.rules = any }) }

// stop makes the service unhealthy for good.
func (h *healthState) stop() { h.update(func() { h.stopping = true }) }

// healthy reports the state.
func (h *healthState) healthy() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ok
}

func (h *healthState) update(change func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	change()
	h.ok = !h.stopping && (!h.needRules || h.rules)
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if h.ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	h.grpc.SetServingStatus("", st)
	h.grpc.SetServingStatus(healthService, st)
}

// ServeHTTP answers GET /healthcheck as envoyproxy/ratelimit does: 200 with
// "OK" when healthy, 500 with no body when not.
func (h *healthState) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	if !h.healthy() {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("OK"))
}
