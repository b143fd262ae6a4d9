package service

import (
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ratelimitVariables are the environment variables of envoyproxy/ratelimit's
// settings (src/settings/settings.go). One of them set, without --config,
// puts limiterd in envoyproxy/ratelimit mode (see ratelimitConfig).
var ratelimitVariables = []string{
	"HOST", "PORT", "DEBUG_HOST", "DEBUG_PORT",
	"GRPC_UDS", "GRPC_HOST", "GRPC_PORT", "GRPC_MAX_CONNECTION_AGE", "GRPC_MAX_CONNECTION_AGE_GRACE",
	"GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN",
	"LOG_LEVEL", "LOG_FORMAT",
	"CONFIG_TYPE", "FORCE_START_WITHOUT_INITIAL_CONFIG",
	"CONFIG_GRPC_XDS_NODE_ID", "CONFIG_GRPC_XDS_NODE_METADATA", "CONFIG_GRPC_XDS_SERVER_URL",
	"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
	"CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
	"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
	"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_MAX_INTERVAL", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
	"XDS_CLIENT_BACKOFF_JITTER", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
	"USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS", "USE_STATSD", "STATSD_HOST", "STATSD_PORT", "EXTRA_TAGS",
	"STATS_FLUSH_INTERVAL", "DISABLE_STATS", "USE_PROMETHEUS", "PROMETHEUS_ADDR", "PROMETHEUS_PATH", "PROMETHEUS_MAPPER_YAML",
	"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY", "RUNTIME_IGNOREDOTFILES", "RUNTIME_WATCH_ROOT",
	"EXPIRATION_JITTER_MAX_SECONDS", "LOCAL_CACHE_SIZE_IN_BYTES", "NEAR_LIMIT_RATIO", "CACHE_KEY_PREFIX", "BACKEND_TYPE",
	"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
	"LIMIT_RESPONSE_HEADERS_ENABLED", "LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER",
	"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
	"REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_URL", "REDIS_POOL_SIZE", "REDIS_AUTH",
	"REDIS_TLS", "REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
	"REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT",
	"REDIS_PERSECOND", "REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL",
	"REDIS_PERSECOND_POOL_SIZE", "REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_TLS",
	"REDIS_SENTINEL_AUTH", "REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND_PIPELINE_LIMIT",
	"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "REDIS_TIMEOUT", "REDIS_PERSECOND_TIMEOUT",
	"REDIS_POOL_ON_EMPTY_BEHAVIOR", "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
	"MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH", "MEMCACHE_TLS",
	"MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
	"SHADOW_MODE", "QUOTA_MODE", "RESPONSE_DYNAMIC_METADATA", "MERGE_DOMAIN_CONFIG",
	"TRACING_ENABLED", "TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE", "TRACING_SERVICE_INSTANCE_ID",
	"TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE",
}

// ratelimitVariablesSet lists those of envoyproxy/ratelimit's variables that
// are set to something other than the empty string.
func ratelimitVariablesSet(lookup func(string) (string, bool)) []string {
	var set []string
	for _, name := range ratelimitVariables {
		if v, ok := lookup(name); ok && v != "" {
			set = append(set, name)
		}
	}
	return set
}

// envSettings are what envoyproxy/ratelimit's variables set beside a
// Config: the log's level and format, and what to say at start.
type envSettings struct {
	level    slog.Level
	format   string
	warnings []string // one log line each
}

// RuntimeRules is envoyproxy/ratelimit's layout of rule files
// (RUNTIME_ROOT, RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY,
// RUNTIME_IGNOREDOTFILES, RUNTIME_WATCH_ROOT), read as it reads them: every
// file under the application directory, in subdirectories too, whatever
// its name (see runtimeFiles).
type RuntimeRules struct {
	Root, Subdirectory, AppDirectory string
	// IgnoreDotFiles skips files and directories whose names start with a
	// dot (a Kubernetes ConfigMap volume's ..data and its timestamped
	// directory among them).
	IgnoreDotFiles bool
	// WatchRoot reads Root/Subdirectory and keeps the files whose path
	// below it, with dots for slashes, starts with AppDirectory followed
	// by a dot; without it, Root/Subdirectory/AppDirectory is read. Either
	// way the rules are polled, so that a swap of RUNTIME_ROOT's symlink
	// and a change of a file inside are both seen.
	WatchRoot bool
}

// dir is the directory read.
func (r *RuntimeRules) dir() string {
	if r.WatchRoot {
		return filepath.Join(r.Root, r.Subdirectory)
	}
	return filepath.Join(r.Root, r.Subdirectory, r.AppDirectory)
}

// Defaults of envoyproxy/ratelimit's settings that limiterd's differ from.
const (
	rlRuntimeRoot = "/srv/runtime_data/current"
	rlRedisURL    = "/var/run/nutcracker/ratelimit.sock"
)

// ratelimitConfig is the configuration envoyproxy/ratelimit's variables
// describe, each variable taking its value or envoyproxy/ratelimit's
// default, over limiterd's defaults for what they do not say (the
// algorithm of POST /limit and ratelimiter.v1, the limits, the servers'
// timeouts). trigger is the variable that turned the mode on, named in the
// refusals of defaults. A variable limiterd cannot honour is refused with
// a *ConfigError naming it.
func ratelimitConfig(lookup func(string) (string, bool), trigger string) (Config, envSettings, error) {
	cfg := defaultConfig()
	cfg.file = envSource
	e := envReader{lookup: lookup}
	var out envSettings

	// Listeners. ratelimit always serves its debug port (/rlconfig);
	// limiterd serves pprof only on --debug-addr.
	cfg.HTTPAddr = e.hostPort("HOST", "0.0.0.0", "PORT", 8080)
	cfg.GRPCAddr = e.hostPort("GRPC_HOST", "0.0.0.0", "GRPC_PORT", 8081)
	cfg.RLConfigAddr = e.hostPort("DEBUG_HOST", "0.0.0.0", "DEBUG_PORT", 6070)
	cfg.GRPCUDS = e.str("GRPC_UDS", "")
	cfg.Servers.GRPCMaxConnectionAge = e.nonNegDuration("GRPC_MAX_CONNECTION_AGE", 24*time.Hour)
	cfg.Servers.GRPCMaxConnectionAgeGrace = e.nonNegDuration("GRPC_MAX_CONNECTION_AGE_GRACE", time.Hour)
	e.grpcTLS(&cfg)

	out.level = e.logLevel("LOG_LEVEL", "WARN")
	out.format = "text"
	switch f := e.str("LOG_FORMAT", "text"); strings.ToLower(f) {
	case "text":
	case "json":
		out.format = "json"
	default:
		e.fail("LOG_FORMAT", "must be text or json, not "+strconv.Quote(f))
	}

	// Rules: a directory, or an xDS server. The xDS variables are checked
	// either way, as ratelimit parses every variable.
	xds := e.xds()
	e.nonNegDuration("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", 3*time.Second)
	e.bool("FORCE_START_WITHOUT_INITIAL_CONFIG", false)
	rt := RuntimeRules{
		Root:           e.str("RUNTIME_ROOT", rlRuntimeRoot),
		Subdirectory:   e.str("RUNTIME_SUBDIRECTORY", ""),
		AppDirectory:   e.str("RUNTIME_APPDIRECTORY", "config"),
		IgnoreDotFiles: e.bool("RUNTIME_IGNOREDOTFILES", false),
		WatchRoot:      e.bool("RUNTIME_WATCH_ROOT", true),
	}
	switch t := e.str("CONFIG_TYPE", "FILE"); {
	case strings.EqualFold(t, "FILE"):
		if rt.WatchRoot && rt.Subdirectory == "" {
			// goruntime loads nothing without a subdirectory when it
			// watches the root: neither does limiterd.
			out.warnings = append(out.warnings, "RUNTIME_SUBDIRECTORY is empty and RUNTIME_WATCH_ROOT is true: no rule files are read (as envoyproxy/ratelimit reads none); set RUNTIME_SUBDIRECTORY, or RUNTIME_WATCH_ROOT=false to read RUNTIME_ROOT/RUNTIME_APPDIRECTORY")
		} else {
			cfg.Runtime = &rt
			cfg.Envoy.RulesDir = rt.dir()
		}
	case strings.EqualFold(t, "GRPC_XDS_SOTW"):
		cfg.Envoy.XDS = xds
		if e.set("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL") {
			e.fail("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "not supported: limiterd reconnects to the xDS server as XDS_CLIENT_BACKOFF_INITIAL_INTERVAL, _MAX_INTERVAL, _RANDOM_FACTOR and _JITTER say; unset it")
		}
	default:
		e.fail("CONFIG_TYPE", "must be FILE or GRPC_XDS_SOTW, not "+strconv.Quote(t))
	}

	e.stats(&cfg, trigger)
	e.store(&cfg, &out)
	e.envoy(&cfg)

	if e.bool("TRACING_ENABLED", false) {
		e.fail("TRACING_ENABLED", "not supported: limiterd exports no OpenTelemetry traces; unset it or set TRACING_ENABLED=false")
	}
	for _, name := range []string{"TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE", "TRACING_SERVICE_INSTANCE_ID"} {
		e.str(name, "")
	}
	switch p := e.str("TRACING_EXPORTER_PROTOCOL", "http"); strings.ToLower(p) {
	case "http", "grpc":
	default:
		e.fail("TRACING_EXPORTER_PROTOCOL", "must be http or grpc, not "+strconv.Quote(p))
	}
	e.float("TRACING_SAMPLING_RATE", 1)
	return cfg, out, e.err
}

// grpcTLS reads GRPC_SERVER_USE_TLS and its files.
func (e *envReader) grpcTLS(cfg *Config) {
	if !e.bool("GRPC_SERVER_USE_TLS", false) {
		return
	}
	cfg.GRPCTLS = GRPCTLS{
		CertFile:     e.str("GRPC_SERVER_TLS_CERT", ""),
		KeyFile:      e.str("GRPC_SERVER_TLS_KEY", ""),
		ClientCAFile: e.str("GRPC_CLIENT_TLS_CACERT", ""),
		ClientSAN:    e.str("GRPC_CLIENT_TLS_SAN", ""),
	}
	if cfg.GRPCTLS.CertFile == "" || cfg.GRPCTLS.KeyFile == "" {
		e.fail("GRPC_SERVER_TLS_CERT", "GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
	}
}

// stats reads the metrics variables: Prometheus only, the others refused.
func (e *envReader) stats(cfg *Config, trigger string) {
	disable := e.bool("DISABLE_STATS", false)
	dog := e.bool("USE_DOG_STATSD", false)
	statsd := e.bool("USE_STATSD", true)
	prom := e.bool("USE_PROMETHEUS", false)
	addr := e.str("PROMETHEUS_ADDR", ":9090")
	path := e.str("PROMETHEUS_PATH", "/metrics")
	mapper := e.str("PROMETHEUS_MAPPER_YAML", "")
	tags := e.str("EXTRA_TAGS", "")
	e.str("STATSD_HOST", "localhost")
	e.port("STATSD_PORT", 8125)
	e.str("USE_DOG_STATSD_MOGRIFIERS", "")
	e.nonNegDuration("STATS_FLUSH_INTERVAL", 10*time.Second)
	cfg.MetricsAddr = ""
	why := "envoyproxy/ratelimit's variables are read because " + trigger + " is set and no --config is given"
	switch {
	case disable:
	case dog:
		e.fail("USE_DOG_STATSD", "limiterd has no DogStatsD sink: set USE_DOG_STATSD=false, USE_STATSD=false and USE_PROMETHEUS=true for Prometheus")
	case statsd:
		reason := "limiterd has no statsd sink: set USE_STATSD=false and USE_PROMETHEUS=true for Prometheus"
		if !e.set("USE_STATSD") {
			reason = "true by default (" + why + "), and " + reason
		}
		e.fail("USE_STATSD", reason)
	case prom:
		cfg.MetricsAddr = addr
		cfg.MetricsPath = path
		if !strings.HasPrefix(path, "/") {
			e.fail("PROMETHEUS_PATH", "must start with /, not "+strconv.Quote(path))
		}
		if mapper != "" {
			e.fail("PROMETHEUS_MAPPER_YAML", "not supported: limiterd names its series itself, envoyproxy/ratelimit's statsd-exporter names among them; unset it")
		}
	}
	if tags != "" && !disable {
		e.fail("EXTRA_TAGS", "not supported: limiterd's series take no extra labels; unset it")
	}
}

// store reads the backend and Redis variables.
func (e *envReader) store(cfg *Config, out *envSettings) {
	switch b := e.str("BACKEND_TYPE", "redis"); strings.ToLower(b) {
	case "redis":
		cfg.Store = "redis"
	case "memcache":
		e.fail("BACKEND_TYPE", "memcache is not supported: limiterd's counters are in Redis (BACKEND_TYPE=redis)")
	default:
		e.fail("BACKEND_TYPE", "must be redis, not "+strconv.Quote(b))
	}
	e.memcache()

	r := &cfg.Backends.Redis
	sock := e.str("REDIS_SOCKET_TYPE", "unix")
	url := e.str("REDIS_URL", rlRedisURL)
	r.Addr, r.PasswordEnv = "", ""
	switch t := e.str("REDIS_TYPE", "SINGLE"); strings.ToLower(t) {
	case "single":
		r.Addr = url
		switch strings.ToLower(sock) {
		case "tcp", "unix":
			r.Network = strings.ToLower(sock)
		default:
			e.fail("REDIS_SOCKET_TYPE", "must be tcp or unix, not "+strconv.Quote(sock))
		}
	case "cluster":
		r.ClusterAddrs = splitList(url)
	case "sentinel":
		parts := splitList(url)
		if len(parts) < 2 {
			e.fail("REDIS_URL", "REDIS_TYPE=SENTINEL needs the master's name and the sentinels: name,host:port,host:port")
			break
		}
		r.SentinelMaster, r.SentinelAddrs = parts[0], parts[1:]
	default:
		e.fail("REDIS_TYPE", "must be SINGLE, CLUSTER or SENTINEL, not "+strconv.Quote(t))
	}
	r.PoolSize = int64(e.between("REDIS_POOL_SIZE", 10, 0, 1<<16))
	if auth := e.str("REDIS_AUTH", ""); auth != "" {
		if user, pass, ok := strings.Cut(auth, ":"); ok {
			r.Username, r.Password = user, pass
		} else {
			r.Password = auth
		}
	}
	r.SentinelPassword = e.str("REDIS_SENTINEL_AUTH", "")
	r.TLS = RedisTLS{
		Enabled:                  e.bool("REDIS_TLS", false),
		CAFile:                   e.str("REDIS_TLS_CACERT", ""),
		CertFile:                 e.str("REDIS_TLS_CLIENT_CERT", ""),
		KeyFile:                  e.str("REDIS_TLS_CLIENT_KEY", ""),
		SkipHostnameVerification: e.bool("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false),
	}
	r.Timeout = e.nonNegDuration("REDIS_TIMEOUT", 10*time.Second)
	if e.nonNegDuration("REDIS_PIPELINE_WINDOW", 0) > 0 {
		out.warnings = append(out.warnings, "REDIS_PIPELINE_WINDOW has no effect: limiterd always sends the decisions that arrive together in one round trip")
	}
	e.between("REDIS_PIPELINE_LIMIT", 0, 0, 1<<30) // no effect in envoyproxy/ratelimit either
	if e.bool("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false) {
		e.fail("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "not supported: limiterd's health does not follow its Redis connections (a store failure is answered by on_store_failure); unset it")
	}
	e.poolOnEmpty("REDIS_POOL_ON_EMPTY_BEHAVIOR")
	r.LocalAllowance = e.bool("REDIS_LOCAL_ALLOWANCE", r.LocalAllowance)
	r.ColdLease = e.nonNegDuration("REDIS_LOCAL_ALLOWANCE_COLD_LEASE", r.ColdLease)

	// A second Redis for per-second limits.
	if e.bool("REDIS_PERSECOND", false) {
		e.fail("REDIS_PERSECOND", "not supported: limiterd keeps per-second counters in the same Redis as the others (REDIS_URL); unset it or set REDIS_PERSECOND=false")
	}
	for _, name := range []string{"REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL", "REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_SENTINEL_AUTH"} {
		e.str(name, "")
	}
	e.between("REDIS_PERSECOND_POOL_SIZE", 10, 0, 1<<16)
	e.bool("REDIS_PERSECOND_TLS", false)
	e.nonNegDuration("REDIS_PERSECOND_PIPELINE_WINDOW", 0)
	e.between("REDIS_PERSECOND_PIPELINE_LIMIT", 0, 0, 1<<30)
	e.nonNegDuration("REDIS_PERSECOND_TIMEOUT", 10*time.Second)
	e.poolOnEmpty("REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR")
}

// memcache checks the memcache variables, which matter only with
// BACKEND_TYPE=memcache (refused).
func (e *envReader) memcache() {
	for _, name := range []string{"MEMCACHE_HOST_PORT", "MEMCACHE_SRV", "MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_CACERT"} {
		e.str(name, "")
	}
	e.between("MEMCACHE_MAX_IDLE_CONNS", 2, 0, 1<<30)
	e.nonNegDuration("MEMCACHE_SRV_REFRESH", 0)
	e.bool("MEMCACHE_TLS", false)
	e.bool("MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", false)
}

// poolOnEmpty accepts WAIT, the only value envoyproxy/ratelimit starts
// with (a connection pool that is empty waits, as go-redis's does).
func (e *envReader) poolOnEmpty(name string) {
	switch v := e.str(name, "WAIT"); strings.ToUpper(v) {
	case "CREATE", "ERROR":
		e.fail(name, v+" is not supported (nor by envoyproxy/ratelimit, which stops on it): an empty pool waits; unset it or set WAIT")
	}
}

// envoy reads the settings of the Envoy rate limit service.
func (e *envReader) envoy(cfg *Config) {
	v := &cfg.Envoy
	v.KeyPrefix = e.str("CACHE_KEY_PREFIX", "")
	v.LocalCacheBytes = int64(e.between("LOCAL_CACHE_SIZE_IN_BYTES", 0, 0, maxBytes))
	v.NearLimitRatio = e.float("NEAR_LIMIT_RATIO", 0.8)
	if r := v.NearLimitRatio; !(r >= 0 && r <= 1) {
		e.fail("NEAR_LIMIT_RATIO", "must be between 0 and 1, not "+strconv.FormatFloat(r, 'g', -1, 64))
	}
	v.ExpirationJitterMax = time.Duration(e.between("EXPIRATION_JITTER_MAX_SECONDS", 300, 0, 24*3600)) * time.Second
	v.StopIncrementWhenOverLimit = e.bool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false)
	v.ResponseHeaders = EnvoyHeaders{
		Enabled:   e.bool("LIMIT_RESPONSE_HEADERS_ENABLED", false),
		Limit:     e.str("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
		Remaining: e.str("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
		Reset:     e.str("LIMIT_RESET_HEADER", "RateLimit-Reset"),
	}
	v.HealthyWithRulesLoaded = e.bool("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false)
	v.ShadowMode = e.bool("SHADOW_MODE", false)
	v.MergeDomains = e.bool("MERGE_DOMAIN_CONFIG", false)
	if e.bool("QUOTA_MODE", false) {
		e.fail("QUOTA_MODE", "not supported: limiterd has no quota mode; unset it or set QUOTA_MODE=false")
	}
	if e.bool("RESPONSE_DYNAMIC_METADATA", false) {
		e.fail("RESPONSE_DYNAMIC_METADATA", "not supported: limiterd's answers carry no dynamic metadata; unset it or set RESPONSE_DYNAMIC_METADATA=false")
	}
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// hostPort joins a host variable and a port variable.
func (e *envReader) hostPort(hostVar, host, portVar string, port int) string {
	return net.JoinHostPort(e.str(hostVar, host), strconv.Itoa(e.port(portVar, port)))
}

func (e *envReader) port(name string, def int) int {
	return e.between(name, def, 0, 65535)
}

// between reads an integer, as envoyproxy/ratelimit does (decimal, or
// 0x/0o/0b prefixed), that must lie in [min, max].
func (e *envReader) between(name string, def, min, max int) int {
	s := e.str(name, "")
	if s == "" {
		return def
	}
	n, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		e.fail(name, "must be an integer, not "+strconv.Quote(s))
		return def
	}
	if n < int64(min) || n > int64(max) {
		e.fail(name, "must be between "+strconv.Itoa(min)+" and "+strconv.Itoa(max)+", not "+s)
		return def
	}
	return int(n)
}

func (e *envReader) nonNegDuration(name string, def time.Duration) time.Duration {
	d := e.duration(name, def)
	if d < 0 {
		e.fail(name, "must not be negative, not "+d.String())
		return def
	}
	return d
}

// logLevel reads a level by logrus's names, as envoyproxy/ratelimit does,
// in any case: trace and debug are slog's Debug, fatal and panic its Error.
func (e *envReader) logLevel(name, def string) slog.Level {
	s := e.str(name, def)
	switch strings.ToLower(s) {
	case "trace", "debug":
		return slog.LevelDebug
	case "info":
		return slog.LevelInfo
	case "warn", "warning":
		return slog.LevelWarn
	case "error", "fatal", "panic":
		return slog.LevelError
	}
	e.fail(name, "must be debug, info, warn or error, not "+strconv.Quote(s))
	return slog.LevelWarn
}
