package service

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
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
	xds     *xdsClient  // rules from an xDS server; nil without one
	tls     *tls.Config // the gRPC port's; nil without TLS
	headers httplimit.HeaderFormat
	closers []func() error // in the order to close them
	health  *health.Server // grpc.health.v1 on both gRPC servers, following healthz
	healthz *healthState   // GET /healthcheck and the gRPC health service
	holder  string         // the Envoy store's allowance holder; "" without allowances

	httpLn, grpcLn, metricsLn, debugLn, rlconfigLn net.Listener
	udsLn                                          net.Listener // the gRPC APIs on GRPCUDS; nil without it
}

// newServer builds the stores and services of cfg and opens the listeners.
func newServer(cfg Config) (_ *server, err error) {
	s := &server{cfg: cfg, log: cfg.Log, metrics: newMetrics(int(cfg.Limits.MaxMetricSeries)), health: health.NewServer()}
	s.healthz = newHealthState(s.health, cfg.Envoy.HealthyWithRulesLoaded)
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
		if rdb, err = newRedisClient(cfg); err != nil {
			return nil, cfg.errField(redisTLSField(err), "%v", err)
		}
		s.closers = append(s.closers, rdb.Close)
	}
	if err := s.buildEnvoy(rdb); err != nil {
		return nil, err
	}
	if s.tls, err = cfg.GRPCTLS.serverTLS(); err != nil {
		return nil, cfg.errField("grpc_tls", "%s", err.Error())
	}
	if s.keyed, err = newKeyed(cfg, rdb, s.metrics); err != nil {
		return nil, err
	}
	s.closers = append([]func() error{s.keyed.Close}, s.closers...)
	return s, s.listen()
}

// newRedisClient connects to the configured server, cluster or master
// watched by Sentinel servers. The password is never logged.
func newRedisClient(cfg Config) (redis.UniversalClient, error) {
	r := cfg.Backends.Redis
	tc, err := r.TLS.clientTLS()
	if err != nil {
		return nil, err
	}
	pool := int(r.PoolSize)
	if pool == 0 {
		pool = 64
	}
	t := r.Timeout // 0: go-redis's defaults
	switch {
	case r.SentinelMaster != "":
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: r.SentinelMaster, SentinelAddrs: r.SentinelAddrs, SentinelPassword: r.SentinelPassword,
			Username: r.Username, Password: cfg.RedisPassword(), DB: int(r.DB), PoolSize: pool, TLSConfig: tc,
			DialTimeout: t, ReadTimeout: t, WriteTimeout: t,
		}), nil
	case len(r.ClusterAddrs) > 0:
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: r.ClusterAddrs, Username: r.Username, Password: cfg.RedisPassword(), PoolSize: pool, TLSConfig: tc,
			DialTimeout: t, ReadTimeout: t, WriteTimeout: t,
		}), nil
	}
	return redis.NewClient(&redis.Options{
		Network: r.Network, Addr: r.Addr, Username: r.Username, Password: cfg.RedisPassword(), DB: int(r.DB),
		PoolSize: pool, TLSConfig: tc, DialTimeout: t, ReadTimeout: t, WriteTimeout: t,
	}), nil
}

// buildEnvoy makes the Envoy rate limit service and loads its rules.
func (s *server) buildEnvoy(rdb redis.UniversalClient) error {
	var store envoyrl.Store
	if rdb != nil {
		rs := redisstore.New(rdb, redisstore.Options{
			ExpirationJitter: s.cfg.Envoy.ExpirationJitterMax,
			LocalAllowance:   s.cfg.Backends.Redis.LocalAllowance,
		})
		s.holder = rs.AllowanceHolder()
		if s.cfg.Backends.Redis.LocalAllowance {
			s.metrics.allowances("envoy", envoyAllowanceCounts(rs))
		}
		// Before the client: Close gives back what the allowances hold.
		s.closers = append([]func() error{rs.Close}, s.closers...)
		fs, err := s.envoyFallback(rs)
		if err != nil {
			return err
		}
		store = fs
	} else {
		ms, err := envoyrl.NewMemoryStore(s.envoyMemoryOptions())
		if err != nil {
			return err
		}
		s.closers = append(s.closers, ms.Close)
		s.metrics.memoryKeys("envoy", func() float64 { return float64(ms.Len()) })
		store = ms
	}
	e := s.cfg.Envoy
	opts := envoyrl.Options{
		StopIncrementWhenOverLimit: e.StopIncrementWhenOverLimit,
		ShadowMode:                 e.ShadowMode,
		KeyPrefix:                  e.KeyPrefix,
		Observer:                   envoyObserver{s.metrics},
		MaxDescriptors:             int(s.cfg.Limits.MaxDescriptors),
		MaxDescriptorEntries:       int(s.cfg.Limits.MaxDescriptorEntries),
		MaxKeyBytes:                int(s.cfg.Limits.MaxKeyBytes),
		MaxJSONBodyBytes:           s.cfg.Limits.MaxBodyBytes,
		NearLimitRatio:             e.NearLimitRatio,
		LocalCacheBytes:            e.LocalCacheBytes,
	}
	if e.NearLimitRatio == 0 {
		opts.NearLimitRatio = -1 // envoyrl's zero is its default
	}
	if h := e.ResponseHeaders; h.Enabled {
		opts.ResponseHeaders = &envoyrl.ResponseHeaders{Limit: h.Limit, Remaining: h.Remaining, Reset: h.Reset}
	}
	s.envoy = envoyrl.NewService(store, opts)
	parse := envoyrl.ParseOptions{MergeDomains: e.MergeDomains}
	if e.XDS.ServerURL != "" {
		x, err := newXDSClient(e.XDS, s.envoy, s.log, s.metrics)
		if err != nil {
			return s.cfg.errField("envoy.xds", "%s", err.Error())
		}
		x.parse, x.use = parse, s.useRules
		s.xds = x
		return nil
	}
	dir := e.RulesDir
	if dir == "" {
		return nil
	}
	read := func() ([]envoyrl.File, error) { return envoyrl.ReadDir(dir) }
	if rt := s.cfg.Runtime; rt != nil {
		dir = rt.dir()
		if !dirExists(dir) {
			return s.cfg.errField("RUNTIME_ROOT", "%s (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY%s) is not a directory", dir, map[bool]string{false: "/RUNTIME_APPDIRECTORY", true: ""}[rt.WatchRoot])
		}
		read = rt.files
	}
	if !dirExists(dir) {
		return s.cfg.errField("envoy.rules_dir", "%s (--rules) is not a directory", dir)
	}
	s.rules = &ruleWatcher{dir: dir, read: read, svc: s.envoy, log: s.log, metrics: s.metrics, parse: parse, use: s.useRules}
	_, err := s.rules.load()
	return err
}

// useRules puts rules loaded from files or xDS in force: the service
// decides by them, their series exist in /metrics, and the health counts
// them as loaded when they name a domain.
func (s *server) useRules(rules *envoyrl.Rules, files int) {
	// The rules' series exist, at 0, before the rules decide anything.
	s.metrics.rulesInForce(rules)
	s.envoy.SetRules(rules)
	s.metrics.reloaded(true)
	s.metrics.ruleFiles.Set(float64(files))
	s.healthz.rulesLoaded(len(rules.Domains()) > 0)
}

// envoyMemoryOptions are the Envoy API's memory stores' options: as many
// counters at most as the keyed limits hold keys (max_keys).
func (s *server) envoyMemoryOptions() envoyrl.MemoryOptions {
	m := s.cfg.Backends.InMemory
	return envoyrl.MemoryOptions{Shards: int(m.ShardsCount), MaxCounters: int(m.MaxKeys)}
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
		mem, err := envoyrl.NewMemoryStore(s.envoyMemoryOptions())
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, mem.Close)
		s.metrics.memoryKeys("envoy_fallback", func() float64 { return float64(mem.Len()) })
		local = mem
	}
	if mode == envoyrl.FailOpen {
		// Decided as FailOpen decides, through a stand-in that marks the
		// answer (see failOpenStore).
		mode, local = envoyrl.FailFallback, failOpenStore{}
	}
	return envoyrl.WithFailurePolicy(primary, envoyrl.FailureOptions{
		Mode:      mode,
		Fallback:  local,
		Replicas:  s.cfg.Replicas,
		Timeout:   storeTimeout,
		OnFailure: func(error) { s.metrics.envoyStoreError() },
	})
}

func (s *server) listen() (err error) {
	if s.httpLn, err = net.Listen("tcp", s.cfg.HTTPAddr); err != nil {
		return fmt.Errorf("limiterd: --http-addr: %w", err)
	}
	if s.grpcLn, err = net.Listen("tcp", s.cfg.GRPCAddr); err != nil {
		return fmt.Errorf("limiterd: --grpc-addr: %w", err)
	}
	if path := s.cfg.GRPCUDS; path != "" {
		if s.udsLn, err = listenUnix(path); err != nil {
			return fmt.Errorf("limiterd: GRPC_UDS: %w", err)
		}
	}
	if addr := s.cfg.MetricsAddr; addr != "" {
		if s.metricsLn, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("limiterd: --metrics-addr: %w", err)
		}
	}
	if addr := s.cfg.DebugAddr; addr != "" {
		if s.debugLn, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("limiterd: --debug-addr: %w", err)
		}
	}
	if addr := s.cfg.RLConfigAddr; addr != "" {
		if s.rlconfigLn, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("limiterd: --rlconfig-addr: %w", err)
		}
	}
	return nil
}

// close releases the listeners and the stores.
func (s *server) close() {
	for _, ln := range []net.Listener{s.httpLn, s.grpcLn, s.udsLn, s.metricsLn, s.debugLn, s.rlconfigLn} {
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

// grpcServer makes the gRPC server --grpc-server names, with the limits
// of the servers section (see the package doc's table). Both read Envoy's
// requests and write their answers with envoyrl.Codec (a third less CPU
// than the protobuf library for them), which leaves the other messages to
// gRPC's default codec. Both serve TLS themselves when it is configured:
// the same crypto/tls configuration, certificate reloads and client
// checks.
func (s *server) grpcServer() grpcServer {
	c := s.cfg.Servers
	if s.cfg.GRPCServer == GRPCServerGo {
		// grpc-go's MaxHeaderListSize is left at its default: set, it
		// stops its server from refusing malformed header blocks (h2spec
		// 4.3, 5.5 and 6.2 fail), so max_header_bytes bounds the lean
		// server's header list only.
		opts := []grpc.ServerOption{
			grpc.NumStreamWorkers(streamWorkers), grpc.ForceServerCodecV2(envoyrl.Codec{}),
			grpc.MaxConcurrentStreams(uint32(c.GRPCMaxConcurrentStreams)),
			grpc.MaxRecvMsgSize(int(c.GRPCMaxRecvMsgBytes)),
			grpc.ConnectionTimeout(c.GRPCHandshakeTimeout),
			grpc.KeepaliveEnforcementPolicy(keepalivePolicy(c)),
			grpc.KeepaliveParams(keepalive.ServerParameters{
				MaxConnectionIdle:     c.GRPCMaxConnectionIdle,
				MaxConnectionAge:      c.GRPCMaxConnectionAge,
				MaxConnectionAgeGrace: c.GRPCMaxConnectionAgeGrace,
			}),
		}
		if s.tls != nil {
			opts = append(opts, grpc.Creds(credentials.NewTLS(s.tls)))
		}
		return grpc.NewServer(opts...)
	}
	return &unarygrpc.Server{
		Codec:                 envoyrl.Codec{},
		Workers:               streamWorkers,
		MaxConcurrentStreams:  uint32(c.GRPCMaxConcurrentStreams),
		MaxRecvMsgSize:        int(c.GRPCMaxRecvMsgBytes),
		MaxHeaderListSize:     uint32(s.cfg.Limits.MaxHeaderBytes),
		HandshakeTimeout:      c.GRPCHandshakeTimeout,
		IdleTimeout:           c.GRPCMaxConnectionIdle,
		MaxConnectionAge:      c.GRPCMaxConnectionAge,
		MaxConnectionAgeGrace: c.GRPCMaxConnectionAgeGrace,
		KeepalivePolicy:       keepalivePolicy(c),
		TLSConfig:             s.tls,
		ErrorLog:              slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// keepalivePolicy is both servers' keepalive enforcement: pings closer
// than GRPCKeepaliveMinTime end the connection with GOAWAY
// too_many_pings; pings without calls in flight are allowed.
func keepalivePolicy(c Servers) keepalive.EnforcementPolicy {
	return keepalive.EnforcementPolicy{MinTime: c.GRPCKeepaliveMinTime, PermitWithoutStream: true}
}

// debugServer serves /debug/pprof/ and /rlconfig on --debug-addr.
func (s *server) debugServer() *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /rlconfig", s.handleRLConfig)
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	srv := s.plainServer(mux)
	srv.WriteTimeout = 0 // a CPU profile or a trace takes as long as it asks
	return srv
}

// rlconfigServer serves /rlconfig on --rlconfig-addr.
func (s *server) rlconfigServer() *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /rlconfig", s.handleRLConfig)
	return s.plainServer(mux)
}

// handleRLConfig writes the rules in force as envoyproxy/ratelimit's
// /rlconfig does: one line per limit (see envoyrl.Rules.Dump).
func (s *server) handleRLConfig(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, s.envoy.Rules().Dump())
}

// plainServer is a net/http server of handler with the servers section's
// timeouts and header limit.
func (s *server) plainServer(h http.Handler) *http.Server {
	c := s.cfg.Servers
	return &http.Server{
		Handler:           http1.HeaderLimit(h, int(s.cfg.Limits.MaxHeaderBytes)),
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		WriteTimeout:      c.WriteTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    int(s.cfg.Limits.MaxHeaderBytes),
	}
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
	healthpb.RegisterHealthServer(g, s.health)
	reflection.Register(g)
	hs := s.httpServer()
	var ms, ds, rs *http.Server
	if s.rlconfigLn != nil {
		rs = s.rlconfigServer()
	}
	if s.metricsLn != nil {
		mux := http.NewServeMux()
		mux.Handle("GET "+s.cfg.MetricsPath, promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
		ms = s.plainServer(mux)
	}
	if s.debugLn != nil {
		ds = s.debugServer()
	}

	errs := make(chan error, 5)
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
	if s.xds != nil {
		wg.Add(1)
		go func() { defer wg.Done(); s.xds.run(ctx) }()
		if !s.xds.cfg.StartWithoutRules {
			s.log.Info("waiting for the first rules from the xDS server", "server", s.xds.cfg.ServerURL)
			if !s.xds.waitFirst(ctx) {
				cancel()
				wg.Wait()
				return nil
			}
		}
	}
	start(func() error { return g.Serve(s.grpcLn) })
	if s.udsLn != nil {
		start(func() error { return g.Serve(s.udsLn) })
	}
	start(func() error { return hs.Serve(s.httpLn) })
	if ms != nil {
		start(func() error { return ms.Serve(s.metricsLn) })
	}
	if ds != nil {
		start(func() error { return ds.Serve(s.debugLn) })
	}
	if rs != nil {
		start(func() error { return rs.Serve(s.rlconfigLn) })
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
	s.healthz.stop()
	s.health.Shutdown()
	s.shutdown(g, hs, ms, ds, rs)
	wg.Wait()
	return err
}

// shutdown stops accepting calls and waits for those in flight, up to the
// shutdown timeout, after which it cuts them.
func (s *server) shutdown(g grpcServer, hs *http1.Server, others ...*http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	if err := hs.Shutdown(ctx); err != nil {
		hs.Close()
	}
	for _, o := range others {
		if o == nil {
			continue
		}
		if err := o.Shutdown(ctx); err != nil {
			o.Close()
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
	if s.udsLn != nil {
		attrs = append(attrs, "grpc_uds", s.cfg.GRPCUDS)
	}
	if s.metricsLn != nil {
		attrs = append(attrs, "metrics", s.metricsLn.Addr().String(), "metrics_path", s.cfg.MetricsPath)
	}
	if s.debugLn != nil {
		attrs = append(attrs, "debug", s.debugLn.Addr().String())
	}
	if s.rlconfigLn != nil {
		attrs = append(attrs, "rlconfig", s.rlconfigLn.Addr().String())
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
	if s.xds != nil {
		attrs = append(attrs, "xds", s.xds.cfg.ServerURL, "domains", s.envoy.Rules().Domains())
	}
	if s.holder != "" {
		attrs = append(attrs, "allowance_holder", s.holder)
	}
	attrs = append(attrs, "grpc_tls", s.tls != nil, "grpc_mtls", s.tls != nil && s.tls.ClientCAs != nil)
	s.log.Info("limiterd started", attrs...)
}

// listenUnix listens on the Unix socket path, removing first a socket
// file that nothing answers on (left by a process that did not stop
// cleanly). Anything else at path is refused. The listener removes the
// file when it is closed.
func listenUnix(path string) (net.Listener, error) {
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s is in use by another process", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	return net.Listen("unix", path)
}
