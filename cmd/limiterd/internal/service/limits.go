package service

import (
	"flag"
	"math"
	"strconv"
	"time"
)

// Limits bound what a caller may send and what it can make limiterd hold.
// Each has a field in the file's limits section and a flag of the same
// name with dashes (max_key_bytes, --max-key-bytes).
type Limits struct {
	// MaxKeyBytes bounds a key: X-Client-Key, ratelimiter.v1's key, and an
	// Envoy descriptor's domain, keys and values together. Longer ones are
	// refused: 400, InvalidArgument. Default 1,024.
	MaxKeyBytes int64 `yaml:"max_key_bytes"`
	// MaxDescriptors bounds the descriptors of one Envoy request: 400,
	// InvalidArgument. Default 64.
	MaxDescriptors int64 `yaml:"max_descriptors"`
	// MaxDescriptorEntries bounds the entries of one descriptor: 400,
	// InvalidArgument. Default 32.
	MaxDescriptorEntries int64 `yaml:"max_descriptor_entries"`
	// MaxBodyBytes bounds a REST request's body: 413. Default 65,536.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxHeaderBytes bounds a request's header: on REST 431; on the lean
	// gRPC server the HTTP/2 header list (names, values and 32 bytes a
	// field) is refused with RST_STREAM or ResourceExhausted (grpc-go's
	// server keeps its own bound). Default 16,384.
	MaxHeaderBytes int64 `yaml:"max_header_bytes"`
	// MaxMetricSeries bounds the label sets of limiterd_decisions_total:
	// past it, new rule labels are counted under "other". Domains are
	// labelled only when the rules name them, others as "other". It bounds
	// the statistics keys of the ratelimit_service_rate_limit_* series
	// alike: past it a new key is counted as key1="other" of its domain.
	// Default 10,000.
	MaxMetricSeries int64 `yaml:"max_metric_series"`
}

// Servers are the servers' timeouts and gRPC settings. Each has a field in
// the file's servers section and a flag of the same name with dashes.
type Servers struct {
	// ReadHeaderTimeout bounds the reading of a REST request's header.
	// Default 5 s.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds the reading of a whole REST request, body
	// included. Default 30 s.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds each write of a REST answer (on net/http: from
	// the end of the request's header to the end of its answer). Default
	// 10 s.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// IdleTimeout closes a REST keep-alive connection idle this long.
	// Default 2 min.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// GRPCMaxConcurrentStreams bounds the calls in flight on one gRPC
	// connection; more are refused (REFUSED_STREAM). Default 1,000.
	GRPCMaxConcurrentStreams int64 `yaml:"grpc_max_concurrent_streams"`
	// GRPCMaxRecvMsgBytes bounds a gRPC request message:
	// ResourceExhausted. Default 4 MiB.
	GRPCMaxRecvMsgBytes int64 `yaml:"grpc_max_recv_msg_bytes"`
	// GRPCKeepaliveMinTime is the shortest interval between a client's
	// pings that the gRPC servers tolerate (keepalive enforcement, with
	// pings allowed without calls in flight); a client that pings more
	// often gets GOAWAY too_many_pings. Default 10 s.
	GRPCKeepaliveMinTime time.Duration `yaml:"grpc_keepalive_min_time"`
	// GRPCMaxConnectionIdle closes, with GOAWAY, a gRPC connection that
	// has had no call in flight this long. Default 10 min.
	GRPCMaxConnectionIdle time.Duration `yaml:"grpc_max_connection_idle"`
	// GRPCHandshakeTimeout bounds a new gRPC connection's preface and
	// first SETTINGS. Default 10 s.
	GRPCHandshakeTimeout time.Duration `yaml:"grpc_handshake_timeout"`
	// GRPCMaxConnectionAge closes, with GOAWAY, a gRPC connection this old
	// (its GRPC_MAX_CONNECTION_AGE); 0 (default) never does.
	GRPCMaxConnectionAge time.Duration `yaml:"grpc_max_connection_age"`
	// GRPCMaxConnectionAgeGrace is how long calls in flight may finish
	// after that GOAWAY (its GRPC_MAX_CONNECTION_AGE_GRACE); 0 means no
	// bound.
	GRPCMaxConnectionAgeGrace time.Duration `yaml:"grpc_max_connection_age_grace"`
}

func defaultLimits() Limits {
	return Limits{
		MaxKeyBytes: 1 << 10, MaxDescriptors: 64, MaxDescriptorEntries: 32,
		MaxBodyBytes: 64 << 10, MaxHeaderBytes: 16 << 10, MaxMetricSeries: 10_000,
	}
}

func defaultServers() Servers {
	return Servers{
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		GRPCMaxConcurrentStreams: 1000, GRPCMaxRecvMsgBytes: 4 << 20,
		GRPCKeepaliveMinTime: 10 * time.Second, GRPCMaxConnectionIdle: 10 * time.Minute,
		GRPCHandshakeTimeout: 10 * time.Second,
	}
}

// addLimitFlags registers a flag for every field of the limits and servers
// sections, with c's values as their defaults.
func addLimitFlags(fs *flag.FlagSet, c *Config) {
	l, s := &c.Limits, &c.Servers
	fs.Int64Var(&l.MaxKeyBytes, "max-key-bytes", l.MaxKeyBytes, "longest key, in bytes; longer: 400 / InvalidArgument")
	fs.Int64Var(&l.MaxDescriptors, "max-descriptors", l.MaxDescriptors, "most descriptors in one Envoy request; more: 400 / InvalidArgument")
	fs.Int64Var(&l.MaxDescriptorEntries, "max-descriptor-entries", l.MaxDescriptorEntries, "most entries in one descriptor; more: 400 / InvalidArgument")
	fs.Int64Var(&l.MaxBodyBytes, "max-body-bytes", l.MaxBodyBytes, "largest REST request body; larger: 413")
	fs.Int64Var(&l.MaxHeaderBytes, "max-header-bytes", l.MaxHeaderBytes, "largest request header (REST 431; gRPC header list)")
	fs.Int64Var(&l.MaxMetricSeries, "max-metric-series", l.MaxMetricSeries, "most label sets of limiterd_decisions_total; past it rules count as \"other\"")
	fs.DurationVar(&s.ReadHeaderTimeout, "read-header-timeout", s.ReadHeaderTimeout, "REST: longest wait for a request's header")
	fs.DurationVar(&s.ReadTimeout, "read-timeout", s.ReadTimeout, "REST: longest wait for a whole request, body included")
	fs.DurationVar(&s.WriteTimeout, "write-timeout", s.WriteTimeout, "REST: longest write of an answer")
	fs.DurationVar(&s.IdleTimeout, "idle-timeout", s.IdleTimeout, "REST: keep-alive connections idle this long are closed")
	fs.Int64Var(&s.GRPCMaxConcurrentStreams, "grpc-max-concurrent-streams", s.GRPCMaxConcurrentStreams, "gRPC: most calls in flight on one connection")
	fs.Int64Var(&s.GRPCMaxRecvMsgBytes, "grpc-max-recv-msg-bytes", s.GRPCMaxRecvMsgBytes, "gRPC: largest request message; larger: ResourceExhausted")
	fs.DurationVar(&s.GRPCKeepaliveMinTime, "grpc-keepalive-min-time", s.GRPCKeepaliveMinTime, "gRPC: shortest interval between a client's pings; more often: GOAWAY too_many_pings")
	fs.DurationVar(&s.GRPCMaxConnectionIdle, "grpc-max-connection-idle", s.GRPCMaxConnectionIdle, "gRPC: connections without calls this long are closed with GOAWAY")
	fs.DurationVar(&s.GRPCHandshakeTimeout, "grpc-handshake-timeout", s.GRPCHandshakeTimeout, "gRPC: longest wait for a new connection's preface and settings")
	fs.DurationVar(&s.GRPCMaxConnectionAge, "grpc-max-connection-age", s.GRPCMaxConnectionAge, "gRPC: connections this old (give or take 10%) are closed with GOAWAY; 0 never")
	fs.DurationVar(&s.GRPCMaxConnectionAgeGrace, "grpc-max-connection-age-grace", s.GRPCMaxConnectionAgeGrace, "gRPC: how long calls may finish after that GOAWAY; 0 no bound")
}

// A rangeCheck is one numeric field and the values it may take.
type rangeCheck struct {
	field    string
	value    float64
	min, max float64
	set      bool // false: the field is absent (a nil pointer), not checked here
	dur      bool // a duration, in nanoseconds: said as one
}

const (
	year     = 365 * 24 * 3600 // seconds
	maxBytes = 1 << 30
)

// ranges lists every numeric field of the file with its bounds, so that a
// value that would overflow a duration or a size where it is used is
// refused with the field's name instead.
func (c *Config) ranges() []rangeCheck {
	a, m, r, l, s := &c.AlgoSettings, &c.Backends.InMemory, &c.Backends.Redis, &c.Limits, &c.Servers
	f := func(p *float64) (float64, bool) {
		if p == nil {
			return 0, false
		}
		return *p, true
	}
	i := func(p *int64) (float64, bool) {
		if p == nil {
			return 0, false
		}
		return float64(*p), true
	}
	n := func(field string, v int64, min, max float64) rangeCheck {
		return rangeCheck{field, float64(v), min, max, true, false}
	}
	d := func(field string, v time.Duration, min, max time.Duration) rangeCheck {
		return rangeCheck{field, float64(v), float64(min), float64(max), true, true}
	}
	capacity, capSet := f(a.Capacity)
	rate, rateSet := f(a.Rate)
	window, winSet := i(a.WindowSize)
	maxReq, maxSet := i(a.MaxRequests)
	return []rangeCheck{
		{"algo_settings.capacity", capacity, 0.001, maxTokens, capSet, false},
		{"algo_settings.rate", rate, 1e-6, maxTokens, rateSet, false},
		{"algo_settings.window_size", window, 1, year, winSet, false},
		{"algo_settings.max_requests", maxReq, 1, maxTokens, maxSet, false},
		n("backends.in_memory.default_ttl", m.DefaultTTL, 1, year),
		n("backends.in_memory.eviction_time", m.EvictionTime, 1, year),
		n("backends.in_memory.shards_count", m.ShardsCount, 1, 1<<16),
		n("backends.in_memory.max_keys", m.MaxKeys, 1, 1<<30),
		n("backends.redis.db", r.DB, 0, 1<<20),
		n("backends.redis.default_ttl", r.DefaultTTL, 1, year),
		n("metrics.port", c.Metrics.Port, 0, 65535),
		n("replicas", int64(c.Replicas), 1, 1<<16),
		n("limits.max_key_bytes", l.MaxKeyBytes, 1, 1<<20),
		n("limits.max_descriptors", l.MaxDescriptors, 1, 1<<16),
		n("limits.max_descriptor_entries", l.MaxDescriptorEntries, 1, 1<<10),
		n("limits.max_body_bytes", l.MaxBodyBytes, 1<<10, maxBytes),
		n("limits.max_header_bytes", l.MaxHeaderBytes, 1<<10, 1<<24),
		n("limits.max_metric_series", l.MaxMetricSeries, 1, 1<<20),
		d("servers.read_header_timeout", s.ReadHeaderTimeout, time.Millisecond, 24*time.Hour),
		d("servers.read_timeout", s.ReadTimeout, time.Millisecond, 24*time.Hour),
		d("servers.write_timeout", s.WriteTimeout, time.Millisecond, 24*time.Hour),
		d("servers.idle_timeout", s.IdleTimeout, time.Millisecond, 24*time.Hour),
		n("servers.grpc_max_concurrent_streams", s.GRPCMaxConcurrentStreams, 1, 1<<20),
		n("servers.grpc_max_recv_msg_bytes", s.GRPCMaxRecvMsgBytes, 1<<10, maxBytes),
		d("servers.grpc_keepalive_min_time", s.GRPCKeepaliveMinTime, time.Millisecond, 24*time.Hour),
		d("servers.grpc_max_connection_idle", s.GRPCMaxConnectionIdle, time.Second, 24*365*time.Hour),
		d("servers.grpc_handshake_timeout", s.GRPCHandshakeTimeout, time.Millisecond, time.Hour),
		d("servers.grpc_max_connection_age", s.GRPCMaxConnectionAge, 0, 24*365*time.Hour),
		d("servers.grpc_max_connection_age_grace", s.GRPCMaxConnectionAgeGrace, 0, 24*365*time.Hour),
		n("backends.redis.pool_size", r.PoolSize, 0, 1<<16),
		{"envoy.near_limit_ratio", c.Envoy.NearLimitRatio, 0, 1, true, false},
		n("envoy.local_cache_size_in_bytes", c.Envoy.LocalCacheBytes, 0, maxBytes),
		d("envoy.expiration_jitter_max", c.Envoy.ExpirationJitterMax, 0, 24*time.Hour),
	}
}

// validateRanges refuses a numeric field outside its bounds.
func (c *Config) validateRanges() error {
	for _, r := range c.ranges() {
		if !r.set || (r.value >= r.min && r.value <= r.max) {
			continue
		}
		if math.IsNaN(r.value) {
			return c.errField(r.field, "must be a number")
		}
		if r.dur {
			return c.errField(r.field, "must be between %v and %v, not %v",
				time.Duration(r.min), time.Duration(r.max), time.Duration(r.value))
		}
		num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
		return c.errField(r.field, "must be between %s and %s, not %s", num(r.min), num(r.max), num(r.value))
	}
	return nil
}
