package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	ratelimiterv1 "github.com/costwise/batcher/api/ratelimiter/v1"
	"github.com/costwise/batcher/cmd/limiterd/internal/http1"
	"github.com/costwise/batcher/cmd/limiterd/internal/unarygrpc"
	"github.com/costwise/batcher/envoyrl"
	"github.com/costwise/batcher/envoyrl/redisstore"
	"github.com/costwise/batcher/middleware/httplimit"
)

// server is a configured limiterd: its stores, its services and its
// listeners.
type server struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	keyed   keyedLimiter
	envoy   *envoyrl.Service
	rules   *ruleWatcher
	headers httplimit.HeaderFormat
	closers []func() error // in the order to close them

	httpLn, grpcLn, metricsLn net.Listener
}

// newServer builds the stores and services of cfg and opens the listeners.
func newServer(cfg Config) (_ *server, err error) {
	s := &server{cfg: cfg, log: cfg.Log, metrics: newMetrics()}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	s.headers, err = httplimit.ParseHeaderFormat(cfg.Headers)
	if err != nil {
		return nil, &ConfigError{File: cfg.file, Field: "headers", Reason: err.Error()}
	}
	var rdb redis.UniversalClient
	if cfg.Store == "redis" {
		rdb = newRedisClient(cfg)
		s.closers = append(s.closers, rdb.Close)
	}
	if err := s.buildEnvoy(rdb); err != nil {
		return nil, err
	}
	if s.keyed, err = newKeyed(cfg, rdb, s.metrics); err != nil {
		return nil, err
	}
	s.closers = append([]func() error{s.keyed.Close}, s.closers...)
	return s, s.listen()
}

// newRedisClient connects to the configured server or cluster. The
// password is never logged.
func newRedisClient(cfg Config) redis.UniversalClient {
	r := cfg.Backends.Redis
	if len(r.ClusterAddrs) > 0 {
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: r.ClusterAddrs, Password: cfg.RedisPassword(), PoolSize: 64,
		})
	}
	return redis.NewClient(&redis.Options{
		Addr: r.Addr, Password: cfg.RedisPassword(), DB: int(r.DB), PoolSize: 64,
	})
}

// buildEnvoy makes the Envoy rate limit service and loads its rules.
func (s *server) buildEnvoy(rdb redis.UniversalClient) error {
	var store envoyrl.Store
	if rdb != nil {
		rs := redisstore.New(rdb, redisstore.Options{})
		s.closers = append(s.closers, rs.Close)
		fs, err := s.envoyFallback(rs)
		if err != nil {
			return err
		}
		store = fs
	} else {
		ms, err := envoyrl.NewMemoryStore(envoyrl.MemoryOptions{Shards: int(s.cfg.Backends.InMemory.ShardsCount)})
		if err != nil {
			return err
		}
		s.closers = append(s.closers, ms.Close)
		store = ms
	}
	e := s.cfg.Envoy
	s.envoy = envoyrl.NewService(store, envoyrl.Options{
		StopIncrementWhenOverLimit: e.StopIncrementWhenOverLimit,
		ShadowMode:                 e.ShadowMode,
		KeyPrefix:                  e.KeyPrefix,
		Observer:                   envoyObserver{s.metrics},
	})
	dir := e.RulesDir
	if dir == "" {
		return nil
	}
	if !dirExists(dir) {
		return &envoyrl.ConfigError{File: dir, Reason: "not a directory"}
	}
	s.rules = &ruleWatcher{dir: dir, svc: s.envoy, log: s.log, metrics: s.metrics}
	_, err := s.rules.load()
	return err
}

// envoyFallback wraps the Envoy API's Redis store in the failure policy,
// the same as the keyed APIs': a call Redis does not answer within
// storeTimeout is a failure; after a failure Redis is left alone for a
// second, then probed by one call at a time, the calls answered OK
// (fail_open), Unavailable (fail_closed) or counted in memory at the limits
// divided by the configured replicas (fallback).
func (s *server) envoyFallback(primary envoyrl.Store) (envoyrl.Store, error) {
	mode := failureMode(s.cfg.OnStoreFailure)
	var local envoyrl.Store
	if mode == envoyrl.FailFallback {
		mem, err := envoyrl.NewMemoryStore(envoyrl.MemoryOptions{Shards: int(s.cfg.Backends.InMemory.ShardsCount)})
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, mem.Close)
		local = mem
	}
	return envoyrl.WithFailurePolicy(primary, envoyrl.FailureOptions{
		Mode:      mode,
		Fallback:  local,
		Replicas:  s.cfg.Replicas,
		Timeout:   storeTimeout,
		OnFailure: func(error) { s.metrics.storeErrors.WithLabelValues("envoy").Inc() },
	})
}

func (s *server) listen() (err error) {
	if s.httpLn, err = net.Listen("tcp", s.cfg.HTTPAddr); err != nil {
		return fmt.Errorf("limiterd: --http-addr: %w", err)
	}
	if s.grpcLn, err = net.Listen("tcp", s.cfg.GRPCAddr); err != nil {
		return fmt.Errorf("limiterd: --grpc-addr: %w", err)
	}
	if addr := s.cfg.MetricsAddr; addr != "" {
		if s.metricsLn, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("limiterd: --metrics-addr: %w", err)
		}
	}
	return nil
}

// close releases the listeners and the stores.
func (s *server) close() {
	for _, ln := range []net.Listener{s.httpLn, s.grpcLn, s.metricsLn} {
		if ln != nil {
			ln.Close()
		}
	}
	for _, c := range s.closers {
		_ = c()
	}
}

// streamWorkers is the number of goroutines kept to run gRPC calls. A call
// arriving while every worker is busy gets a new goroutine, whose stack
// grows again on every call (a tenth of the service's CPU at 64 callers in
// a profile), so there is one worker per call in flight up to this many;
// idle workers take a few kilobytes each.
const streamWorkers = 256

// grpcServer is what limiterd needs of a gRPC server: grpc-go's, or
// unarygrpc's lean one.
type grpcServer interface {
	grpc.ServiceRegistrar
	GetServiceInfo() map[string]grpc.ServiceInfo
	Serve(net.Listener) error
	GracefulStop()
	Stop()
}

// grpcServer makes the gRPC server --grpc-server names. Both read Envoy's
// requests and write their answers with envoyrl.Codec (a third less CPU
// than the protobuf library for them), which leaves the other messages to
// gRPC's default codec.
func (s *server) grpcServer() grpcServer {
	if s.cfg.GRPCServer == GRPCServerGo {
		return grpc.NewServer(grpc.NumStreamWorkers(streamWorkers), grpc.ForceServerCodecV2(envoyrl.Codec{}))
	}
	return &unarygrpc.Server{Codec: envoyrl.Codec{}, Workers: streamWorkers, ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
}

// serve runs every server until ctx ends, then stops them gracefully within
// the shutdown timeout. A server that fails stops the others.
func (s *server) serve(ctx context.Context) error {
	defer s.close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	g := s.grpcServer()
	ratelimiterv1.RegisterRateLimiterServer(g, &allowServer{s: s})
	rlsv3.RegisterRateLimitServiceServer(g, envoyGRPC{s: s})
	// Health checks, and server reflection so that grpcurl lists the
	// services.
	healthpb.RegisterHealthServer(g, health.NewServer())
	reflection.Register(g)
	hs := s.httpServer()
	var ms *http.Server
	if s.metricsLn != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		ms = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	}

	errs := make(chan error, 3)
	var wg sync.WaitGroup
	start := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
				errs <- err
			}
		}()
	}
	start(func() error { return g.Serve(s.grpcLn) })
	start(func() error { return hs.Serve(s.httpLn) })
	if ms != nil {
		start(func() error { return ms.Serve(s.metricsLn) })
	}
	if s.rules != nil {
		wg.Add(1)
		go func() { defer wg.Done(); s.rules.run(ctx, s.cfg.RulesInterval) }()
	}
	s.logStart()

	var err error
	select {
	case <-ctx.Done():
		s.log.Info("stopping: finishing in-flight calls", "timeout", s.cfg.ShutdownTimeout.String())
	case err = <-errs:
	}
	cancel()
	s.shutdown(g, hs, ms)
	wg.Wait()
	return err
}

// shutdown stops accepting calls and waits for those in flight, up to the
// shutdown timeout, after which it cuts them.
func (s *server) shutdown(g grpcServer, hs *http1.Server, ms *http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	if err := hs.Shutdown(ctx); err != nil {
		hs.Close()
	}
	if ms != nil {
		if err := ms.Shutdown(ctx); err != nil {
			ms.Close()
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		g.Stop()
		<-done
	}
	s.log.Info("stopped")
}

func (s *server) logStart() {
	attrs := []any{
		"http", s.httpLn.Addr().String(), "grpc", s.grpcLn.Addr().String(),
		"store", s.cfg.Store, "algorithm", s.cfg.UseAlgo, "on_store_failure", s.cfg.OnStoreFailure,
	}
	if s.metricsLn != nil {
		attrs = append(attrs, "metrics", s.metricsLn.Addr().String())
	}
	if s.cfg.Store == "redis" {
		r := s.cfg.Backends.Redis
		if len(r.ClusterAddrs) > 0 {
			attrs = append(attrs, "redis_cluster", strings.Join(r.ClusterAddrs, ","))
		} else {
			attrs = append(attrs, "redis", r.Addr)
		}
	}
	if s.rules != nil {
		attrs = append(attrs, "rules", s.rules.dir, "domains", s.envoy.Rules().Domains())
	}
	s.log.Info("limiterd started", attrs...)
}
