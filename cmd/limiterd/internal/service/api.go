package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimiterv1 "github.com/costwise/batcher/api/ratelimiter/v1"
	"github.com/costwise/batcher/cmd/limiterd/internal/http1"
	"github.com/costwise/batcher/envoyrl"
	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/middleware/httplimit"
)

// tokenScale is the resolution of fractional costs: costs are counted in
// thousandths of a token, a fractional cost rounded up to the next
// thousandth so that it is never undercharged.
const tokenScale = 1000

// maxTokens is the largest cost a call may ask for.
const maxTokens = 1e12

// verdict is a keyed decision in the terms of the APIs, costs in
// thousandths of a token.
type verdict struct {
	Allowed    bool
	Limit      int64 // thousandths
	Remaining  int64 // thousandths
	RetryAfter time.Duration
	ResetAfter time.Duration
	Window     time.Duration // the window algorithms' window; 0 otherwise
	// Unavailable: the store failed and the policy is fail_closed.
	Unavailable bool
	// Result is the metrics result: allowed, denied, failed_open,
	// failed_closed, fallback_allowed, fallback_denied.
	Result string
}

// keyedLimiter decides POST /limit and ratelimiter.v1 calls.
type keyedLimiter interface {
	// Allow spends milli thousandths of a token from key. An error is a
	// failure the failure policy did not cover.
	Allow(ctx context.Context, key string, milli int64) (verdict, error)
	// Ping reports whether the store answers.
	Ping(ctx context.Context) error
	// Close releases the store.
	Close() error
}

// parseTokens turns a cost in tokens into thousandths, refusing negative,
// non-finite and huge values.
func parseTokens(t float64) (int64, error) {
	if math.IsNaN(t) || math.IsInf(t, 0) || t < 0 {
		return 0, errors.New("tokens must be a number, 0 or more")
	}
	if t > maxTokens {
		return 0, errors.New("tokens must be at most 1e12")
	}
	// Rounded up to a thousandth, so that a positive cost is never free.
	return limit.CostFromFloat(t, tokenScale)
}

// httpServer serves the REST API. POST /limit and POST /json, the calls
// under load, are served on http1's fast path; everything else, and any
// request in a form the fast path leaves alone, by net/http through the
// same handlers.
func (s *server) httpServer() *http1.Server {
	limit := http.HandlerFunc(s.handleLimit)
	json := envoyrl.JSONHandler(s.envoy)
	envoyJSON := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer s.metrics.observe("json", time.Now())
		if s.cfg.OnStoreFailure == "fail_open" {
			ctx, _ := withFailOpenMark(r.Context(), w.Header())
			r = r.WithContext(ctx)
		}
		json.ServeHTTP(w, r)
	})
	mux := http.NewServeMux()
	mux.Handle("POST /limit", limit)
	mux.HandleFunc("GET /health", s.handleHealth)
	mux.Handle("/healthcheck", s.healthz)
	mux.Handle("POST /json", envoyJSON)
	c, maxBody := s.cfg.Servers, s.cfg.Limits.MaxBodyBytes
	return &http1.Server{
		Handler: bodyLimit(mux, maxBody),
		Routes: []http1.Route{
			{Method: http.MethodPost, Path: "/json", Handler: envoyJSON},
			{Method: http.MethodPost, Path: "/limit", Handler: limit},
		},
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		IdleTimeout:       c.IdleTimeout,
		WriteTimeout:      c.WriteTimeout,
		MaxHeaderBytes:    int(s.cfg.Limits.MaxHeaderBytes),
		// The fast path serves bodies up to the limit and hands larger
		// ones to net/http, where bodyLimit refuses them.
		MaxBodyBytes: int(maxBody),
	}
}

// bodyLimit refuses, with 413, a request whose body is larger than max:
// at once when its length is declared, and after reading at most max
// bytes of it when it is not (chunked), before the handler runs, so that
// a handler that ignores its body (POST /limit) is refused one too.
func bodyLimit(h http.Handler, max int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tooLarge := func() {
			w.Header().Set("Connection", "close")
			http.Error(w, "request body larger than "+strconv.FormatInt(max, 10)+" bytes", http.StatusRequestEntityTooLarge)
		}
		if r.ContentLength > max {
			tooLarge()
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, max)
		if r.ContentLength < 0 {
			b, err := io.ReadAll(r.Body)
			var over *http.MaxBytesError
			switch {
			case errors.As(err, &over):
				tooLarge()
				return
			case err != nil:
				http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
				return
			}
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		}
		h.ServeHTTP(w, r)
	})
}

// limitBody is the JSON body of an allowed POST /limit.
type limitBody struct {
	Allowed           bool    `json:"allowed"`
	Limit             float64 `json:"limit"`
	Remaining         float64 `json:"remaining"`
	ResetAfterSeconds float64 `json:"reset_after_seconds"`
}

func (s *server) handleLimit(w http.ResponseWriter, r *http.Request) {
	defer s.metrics.observe("rest", time.Now())
	key := r.Header.Get("X-Client-Key")
	if key == "" {
		http.Error(w, "missing X-Client-Key header", http.StatusBadRequest)
		return
	}
	if max := s.cfg.Limits.MaxKeyBytes; int64(len(key)) > max {
		http.Error(w, "X-Client-Key longer than "+strconv.FormatInt(max, 10)+" bytes", http.StatusBadRequest)
		return
	}
	milli := int64(tokenScale)
	if v := r.Header.Get("X-Required-Tokens"); v != "" {
		t, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err == nil {
			milli, err = parseTokens(t)
		}
		if err != nil {
			http.Error(w, "bad X-Required-Tokens: "+v+": must be a number, 0 or more", http.StatusBadRequest)
			return
		}
	}
	v, err := s.keyed.Allow(r.Context(), key, milli)
	if err != nil {
		s.metrics.storeErrors.WithLabelValues("rest").Inc()
		httplimit.RetryAfter(w.Header(), time.Second)
		httplimit.WriteProblem(w, httplimit.Unavailable(time.Second))
		return
	}
	s.metrics.decision("rest", "", s.cfg.UseAlgo, v.Result)
	if v.Unavailable {
		httplimit.RetryAfter(w.Header(), time.Second)
		httplimit.WriteProblem(w, httplimit.Unavailable(time.Second))
		return
	}
	if v.Result == "failed_open" {
		w.Header().Set(FailOpenHeader, "true")
	}
	httplimit.WriteHeaders(w.Header(), s.headers, time.Now(), httplimit.Status{
		Policy:     s.cfg.UseAlgo,
		Limit:      v.Limit / tokenScale,
		Remaining:  v.Remaining / tokenScale,
		Window:     v.Window,
		Reset:      v.ResetAfter,
		Allowed:    v.Allowed,
		RetryAfter: v.RetryAfter,
	})
	if !v.Allowed {
		httplimit.RetryAfter(w.Header(), v.RetryAfter)
		httplimit.WriteProblem(w, httplimit.QuotaExceeded(v.RetryAfter, s.cfg.UseAlgo))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(limitBody{
		Allowed:           true,
		Limit:             float64(v.Limit) / tokenScale,
		Remaining:         float64(v.Remaining) / tokenScale,
		ResetAfterSeconds: v.ResetAfter.Seconds(),
	})
}

func (s *server) handleHealth(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), pingTimeout)
	defer cancel()
	if err := s.keyed.Ping(ctx); err != nil {
		http.Error(w, "store unavailable", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok"))
}

// allowServer serves ratelimiter.v1.RateLimiter.
type allowServer struct {
	ratelimiterv1.UnimplementedRateLimiterServer
	s *server
}

// Allow implements ratelimiter.v1: tokens 0 means 1; InvalidArgument for an
// empty key, one longer than limits.max_key_bytes, or a negative or
// non-finite cost; Unavailable when the store is
// down and the policy is fail_closed.
func (a *allowServer) Allow(ctx context.Context, in *ratelimiterv1.AllowRequest) (*ratelimiterv1.AllowResponse, error) {
	s := a.s
	defer s.metrics.observe("grpc", time.Now())
	if in.GetKey() == "" {
		return nil, status.Error(codes.InvalidArgument, "key must not be empty")
	}
	if max := s.cfg.Limits.MaxKeyBytes; int64(len(in.GetKey())) > max {
		return nil, status.Errorf(codes.InvalidArgument, "key longer than %d bytes", max)
	}
	tokens := in.GetTokens()
	if tokens == 0 {
		tokens = 1
	}
	milli, err := parseTokens(tokens)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	v, err := s.keyed.Allow(ctx, in.GetKey(), milli)
	if err != nil {
		s.metrics.storeErrors.WithLabelValues("grpc").Inc()
		return nil, status.Error(codes.Unavailable, "store unavailable")
	}
	s.metrics.decision("grpc", "", s.cfg.UseAlgo, v.Result)
	if v.Unavailable {
		return nil, status.Error(codes.Unavailable, "store unavailable")
	}
	if v.Result == "failed_open" {
		setFailOpenTrailer(ctx)
	}
	return &ratelimiterv1.AllowResponse{Allowed: v.Allowed, RetryAfter: durationpb.New(v.RetryAfter)}, nil
}

// envoyGRPC serves Envoy's RateLimitService. The store applies the failure
// policy (see envoyFallback): with fail_open a store failure answers OK;
// with fallback the counters are kept in memory at the limits divided by
// the replicas until the store answers again; with fail_closed, and when
// even the fallback fails, Unavailable, and Envoy's own failure_mode_deny
// decides.
type envoyGRPC struct {
	rlsv3.UnimplementedRateLimitServiceServer
	s *server
}

func (e envoyGRPC) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	start := time.Now()
	defer e.s.metrics.observe("envoy", start)
	defer e.s.metrics.rl.observe(start)
	if e.s.cfg.OnStoreFailure != "fail_open" {
		return envoyrl.GRPCServer{Service: e.s.envoy}.ShouldRateLimit(ctx, req)
	}
	mctx, mark := withFailOpenMark(ctx, nil)
	resp, err := envoyrl.GRPCServer{Service: e.s.envoy}.ShouldRateLimit(mctx, req)
	if err != nil && status.Code(err) == codes.Unavailable {
		resp, err, mark.failed = failOpen(req), nil, true
	}
	if mark.failed {
		markEnvoyFailOpen(ctx, resp)
	}
	return resp, err
}

// failOpen is the answer to a request whose counters could not be reached.
func failOpen(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range req.GetDescriptors() {
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK})
	}
	return resp
}
