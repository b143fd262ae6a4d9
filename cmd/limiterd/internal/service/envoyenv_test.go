package service

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/redistest"
)

// envOf is an environment lookup over m.
func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// parseEnv runs parseFlags over env and args, with its log in a buffer.
func parseEnv(t *testing.T, env map[string]string, args ...string) (Config, *syncBuffer, error) {
	t.Helper()
	var log syncBuffer
	cfg, err := parseFlags(args, &log, envOf(env))
	return cfg, &log, err
}

// TestRatelimitEnvDefaults checks every variable's envoyproxy/ratelimit
// default, with only USE_STATSD=false set (its own default is refused).
func TestRatelimitEnvDefaults(t *testing.T) {
	cfg, log, err := parseEnv(t, map[string]string{"USE_STATSD": "false"})
	if err != nil {
		t.Fatal(err)
	}
	r, e, s := cfg.Backends.Redis, cfg.Envoy, cfg.Servers
	checks := []struct {
		name      string
		got, want any
	}{
		{"HOST:PORT", cfg.HTTPAddr, "0.0.0.0:8080"},
		{"GRPC_HOST:GRPC_PORT", cfg.GRPCAddr, "0.0.0.0:8081"},
		{"DEBUG_HOST:DEBUG_PORT", cfg.RLConfigAddr, "0.0.0.0:6070"},
		{"pprof off", cfg.DebugAddr, ""},
		{"GRPC_UDS", cfg.GRPCUDS, ""},
		{"GRPC_MAX_CONNECTION_AGE", s.GRPCMaxConnectionAge, 24 * time.Hour},
		{"GRPC_MAX_CONNECTION_AGE_GRACE", s.GRPCMaxConnectionAgeGrace, time.Hour},
		{"GRPC_SERVER_USE_TLS", cfg.GRPCTLS, GRPCTLS{}},
		{"metrics off without USE_PROMETHEUS", cfg.MetricsAddr, ""},
		{"BACKEND_TYPE", cfg.Store, "redis"},
		{"REDIS_URL", r.Addr, rlRedisURL},
		{"REDIS_SOCKET_TYPE", r.Network, "unix"},
		{"REDIS_TYPE", r.ClusterAddrs == nil && r.SentinelMaster == "", true},
		{"REDIS_POOL_SIZE", r.PoolSize, int64(10)},
		{"REDIS_AUTH", r.Username + r.Password, ""},
		{"no LIMITERD_REDIS_PASSWORD", r.PasswordEnv, ""},
		{"REDIS_TLS", r.TLS, RedisTLS{}},
		{"REDIS_TIMEOUT", r.Timeout, 10 * time.Second},
		{"REDIS_SENTINEL_AUTH", r.SentinelPassword, ""},
		{"REDIS_LOCAL_ALLOWANCE", r.LocalAllowance, defaultLocalAllowance}, // false unless LIMITERD_TEST_LOCAL_ALLOWANCE
		{"REDIS_LOCAL_ALLOWANCE_COLD_LEASE", r.ColdLease, time.Duration(0)},
		{"CACHE_KEY_PREFIX", e.KeyPrefix, ""},
		{"LOCAL_CACHE_SIZE_IN_BYTES", e.LocalCacheBytes, int64(0)},
		{"NEAR_LIMIT_RATIO", e.NearLimitRatio, 0.8},
		{"EXPIRATION_JITTER_MAX_SECONDS", e.ExpirationJitterMax, 300 * time.Second},
		{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", e.StopIncrementWhenOverLimit, false},
		{"LIMIT_*", e.ResponseHeaders, EnvoyHeaders{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}},
		{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", e.HealthyWithRulesLoaded, false},
		{"SHADOW_MODE", e.ShadowMode, false},
		{"MERGE_DOMAIN_CONFIG", e.MergeDomains, false},
		{"CONFIG_TYPE", e.XDS.ServerURL, ""},
		// RUNTIME_WATCH_ROOT=true without RUNTIME_SUBDIRECTORY: no rules.
		{"RUNTIME_*", cfg.Runtime == nil && e.RulesDir == "", true},
		{"LOG_LEVEL WARN", cfg.Log.Enabled(context.Background(), slog.LevelWarn) && !cfg.Log.Enabled(context.Background(), slog.LevelInfo), true},
		// What envoyproxy/ratelimit does not say keeps limiterd's defaults.
		{"algorithm", cfg.UseAlgo, "token_bucket"},
		{"failure policy", cfg.OnStoreFailure, "fail_open"},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: %#v, want %#v", c.name, c.got, c.want)
		}
	}
	if !strings.Contains(log.String(), "RUNTIME_SUBDIRECTORY is empty") {
		t.Errorf("no warning that no rule files are read: %q", log.String())
	}
}

// TestRatelimitEnvValues checks each variable set to a value limiterd
// honours.
func TestRatelimitEnvValues(t *testing.T) {
	base := map[string]string{"USE_STATSD": "false"}
	cases := []struct {
		name  string
		env   map[string]string
		check func(c Config) bool
	}{
		{"HOST PORT", map[string]string{"HOST": "127.0.0.1", "PORT": "9000"}, func(c Config) bool { return c.HTTPAddr == "127.0.0.1:9000" }},
		{"GRPC_HOST GRPC_PORT", map[string]string{"GRPC_HOST": "::1", "GRPC_PORT": "9001"}, func(c Config) bool { return c.GRPCAddr == "[::1]:9001" }},
		{"DEBUG_HOST DEBUG_PORT", map[string]string{"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0x1770"}, func(c Config) bool { return c.RLConfigAddr == "127.0.0.1:6000" && c.DebugAddr == "" }},
		{"GRPC_UDS", map[string]string{"GRPC_UDS": "/tmp/rl.sock"}, func(c Config) bool { return c.GRPCUDS == "/tmp/rl.sock" }},
		{"GRPC_MAX_CONNECTION_AGE", map[string]string{"GRPC_MAX_CONNECTION_AGE": "5m", "GRPC_MAX_CONNECTION_AGE_GRACE": "0s"}, func(c Config) bool {
			return c.Servers.GRPCMaxConnectionAge == 5*time.Minute && c.Servers.GRPCMaxConnectionAgeGrace == 0
		}},
		{"GRPC_SERVER_USE_TLS", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "c.pem", "GRPC_SERVER_TLS_KEY": "k.pem", "GRPC_CLIENT_TLS_CACERT": "ca.pem", "GRPC_CLIENT_TLS_SAN": "envoy"}, func(c Config) bool {
			return c.GRPCTLS == GRPCTLS{CertFile: "c.pem", KeyFile: "k.pem", ClientCAFile: "ca.pem", ClientSAN: "envoy"}
		}},
		{"USE_PROMETHEUS", map[string]string{"USE_PROMETHEUS": "true"}, func(c Config) bool { return c.MetricsAddr == ":9090" && c.MetricsPath == "/metrics" }},
		{"PROMETHEUS_ADDR PROMETHEUS_PATH", map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": "127.0.0.1:9100", "PROMETHEUS_PATH": "/stats/prometheus"}, func(c Config) bool {
			return c.MetricsAddr == "127.0.0.1:9100" && c.MetricsPath == "/stats/prometheus"
		}},
		{"DISABLE_STATS wins over USE_STATSD", map[string]string{"USE_STATSD": "true", "DISABLE_STATS": "true", "USE_PROMETHEUS": "true"}, func(c Config) bool { return c.MetricsAddr == "" }},
		{"RUNTIME_* watching the root", map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit"}, func(c Config) bool {
			return *c.Runtime == RuntimeRules{Root: "/data", Subdirectory: "ratelimit", AppDirectory: "config", WatchRoot: true} && c.Envoy.RulesDir == "/data/ratelimit"
		}},
		{"RUNTIME_* not watching the root", map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_APPDIRECTORY": "rl", "RUNTIME_WATCH_ROOT": "false", "RUNTIME_IGNOREDOTFILES": "true"}, func(c Config) bool {
			return *c.Runtime == RuntimeRules{Root: "/data", AppDirectory: "rl", IgnoreDotFiles: true} && c.Envoy.RulesDir == "/data/rl"
		}},
		{"CONFIG_TYPE=GRPC_XDS_SOTW", map[string]string{"CONFIG_TYPE": "grpc_xds_sotw", "RUNTIME_SUBDIRECTORY": "ratelimit"}, func(c Config) bool {
			return c.Envoy.XDS.ServerURL == "localhost:18000" && c.Runtime == nil && c.Envoy.RulesDir == ""
		}},
		{"BACKEND_TYPE", map[string]string{"BACKEND_TYPE": "REDIS"}, func(c Config) bool { return c.Store == "redis" }},
		{"REDIS_SOCKET_TYPE REDIS_URL", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379"}, func(c Config) bool {
			return c.Backends.Redis.Network == "tcp" && c.Backends.Redis.Addr == "redis:6379"
		}},
		{"REDIS_TYPE=CLUSTER", map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "a:1,b:2, c:3"}, func(c Config) bool {
			r := c.Backends.Redis
			return reflect.DeepEqual(r.ClusterAddrs, []string{"a:1", "b:2", "c:3"}) && r.Addr == "" && r.Network == ""
		}},
		{"REDIS_TYPE=SENTINEL", map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster,s1:26379,s2:26379", "REDIS_SENTINEL_AUTH": "sp"}, func(c Config) bool {
			r := c.Backends.Redis
			return r.SentinelMaster == "mymaster" && reflect.DeepEqual(r.SentinelAddrs, []string{"s1:26379", "s2:26379"}) && r.SentinelPassword == "sp" && r.Addr == ""
		}},
		{"REDIS_AUTH password", map[string]string{"REDIS_AUTH": "secret"}, func(c Config) bool {
			return c.Backends.Redis.Username == "" && c.RedisPassword() == "secret"
		}},
		{"REDIS_AUTH user:password", map[string]string{"REDIS_AUTH": "alice:pa:ss"}, func(c Config) bool {
			return c.Backends.Redis.Username == "alice" && c.RedisPassword() == "pa:ss"
		}},
		{"REDIS_POOL_SIZE REDIS_TIMEOUT", map[string]string{"REDIS_POOL_SIZE": "3", "REDIS_TIMEOUT": "250ms"}, func(c Config) bool {
			return c.Backends.Redis.PoolSize == 3 && c.Backends.Redis.Timeout == 250*time.Millisecond
		}},
		{"REDIS_TLS", map[string]string{"REDIS_TLS": "true", "REDIS_TLS_CACERT": "ca", "REDIS_TLS_CLIENT_CERT": "c", "REDIS_TLS_CLIENT_KEY": "k", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"}, func(c Config) bool {
			return c.Backends.Redis.TLS == RedisTLS{Enabled: true, CAFile: "ca", CertFile: "c", KeyFile: "k", SkipHostnameVerification: true}
		}},
		{"REDIS_LOCAL_ALLOWANCE", map[string]string{"REDIS_LOCAL_ALLOWANCE": "true"}, func(c Config) bool { return c.Backends.Redis.LocalAllowance }},
		{"REDIS_LOCAL_ALLOWANCE_COLD_LEASE", map[string]string{"REDIS_LOCAL_ALLOWANCE": "true", "REDIS_LOCAL_ALLOWANCE_COLD_LEASE": "90s"}, func(c Config) bool {
			return c.Backends.Redis.LocalAllowance && c.Backends.Redis.ColdLease == 90*time.Second
		}},
		{"REDIS_POOL_ON_EMPTY_BEHAVIOR", map[string]string{"REDIS_POOL_ON_EMPTY_BEHAVIOR": "wait"}, func(c Config) bool { return true }},
		{"Envoy settings", map[string]string{
			"CACHE_KEY_PREFIX": "rl_", "LOCAL_CACHE_SIZE_IN_BYTES": "1048576", "NEAR_LIMIT_RATIO": "0.5",
			"EXPIRATION_JITTER_MAX_SECONDS": "0", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true",
			"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true", "SHADOW_MODE": "true", "MERGE_DOMAIN_CONFIG": "true",
		}, func(c Config) bool {
			e := c.Envoy
			return e.KeyPrefix == "rl_" && e.LocalCacheBytes == 1<<20 && e.NearLimitRatio == 0.5 && e.ExpirationJitterMax == 0 &&
				e.StopIncrementWhenOverLimit && e.HealthyWithRulesLoaded && e.ShadowMode && e.MergeDomains
		}},
		{"LIMIT_*", map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_LIMIT_HEADER": "X-L", "LIMIT_REMAINING_HEADER": "X-R", "LIMIT_RESET_HEADER": "X-T"}, func(c Config) bool {
			return c.Envoy.ResponseHeaders == EnvoyHeaders{Enabled: true, Limit: "X-L", Remaining: "X-R", Reset: "X-T"}
		}},
		{"LOG_LEVEL debug", map[string]string{"LOG_LEVEL": "Debug"}, func(c Config) bool { return c.Log.Enabled(context.Background(), slog.LevelDebug) }},
		{"LOG_LEVEL error", map[string]string{"LOG_LEVEL": "ERROR"}, func(c Config) bool { return !c.Log.Enabled(context.Background(), slog.LevelWarn) }},
		{"variables without effect here", map[string]string{
			"STATSD_HOST": "statsd", "STATSD_PORT": "9125", "STATS_FLUSH_INTERVAL": "1s", "USE_DOG_STATSD_MOGRIFIERS": "x",
			"MEMCACHE_HOST_PORT": "m:11211", "REDIS_PIPELINE_LIMIT": "8", "REDIS_PERSECOND_URL": "x", "TRACING_SERVICE_NAME": "rl",
			"FORCE_START_WITHOUT_INITIAL_CONFIG": "true", "XDS_CLIENT_BACKOFF_JITTER": "false",
		}, func(c Config) bool { return c.Store == "redis" }},
		{"empty counts as unset", map[string]string{"PORT": "", "REDIS_URL": ""}, func(c Config) bool {
			return c.HTTPAddr == "0.0.0.0:8080" && c.Backends.Redis.Addr == rlRedisURL
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range base {
				env[k] = v
			}
			for k, v := range c.env {
				env[k] = v
			}
			cfg, _, err := parseEnv(t, env)
			if err != nil {
				t.Fatal(err)
			}
			if !c.check(cfg) {
				t.Fatalf("%v: config not as set: %+v", c.env, cfg)
			}
		})
	}
}

// TestRatelimitEnvLogFormat checks LOG_FORMAT=json, and a warning that a
// variable has no effect.
func TestRatelimitEnvLogFormat(t *testing.T) {
	cfg, log, err := parseEnv(t, map[string]string{"USE_STATSD": "false", "LOG_FORMAT": "JSON", "REDIS_PIPELINE_WINDOW": "150us"})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Log.Warn("probe")
	if !strings.Contains(log.String(), `"msg":"REDIS_PIPELINE_WINDOW has no effect`) || !strings.Contains(log.String(), `"msg":"probe"`) {
		t.Fatalf("log not JSON with the warning: %q", log.String())
	}
}

// TestRatelimitEnvRefused checks that each value limiterd cannot honour
// is refused with one line naming the variable.
func TestRatelimitEnvRefused(t *testing.T) {
	cases := []struct {
		env  map[string]string
		name string // the variable named
		want string
	}{
		{map[string]string{"PORT": "8080"}, "USE_STATSD", "set USE_STATSD=false and USE_PROMETHEUS=true"},
		{map[string]string{"USE_STATSD": "true"}, "USE_STATSD", "USE_PROMETHEUS=true"},
		{map[string]string{"USE_STATSD": "false", "USE_DOG_STATSD": "true"}, "USE_DOG_STATSD", "Prometheus"},
		{map[string]string{"USE_STATSD": "maybe"}, "USE_STATSD", "true or false"},
		{map[string]string{"USE_STATSD": "false", "USE_PROMETHEUS": "true", "PROMETHEUS_MAPPER_YAML": "/m.yaml"}, "PROMETHEUS_MAPPER_YAML", "not supported"},
		{map[string]string{"USE_STATSD": "false", "USE_PROMETHEUS": "true", "PROMETHEUS_PATH": "metrics"}, "PROMETHEUS_PATH", "must start with /"},
		{map[string]string{"USE_STATSD": "false", "EXTRA_TAGS": "a:b"}, "EXTRA_TAGS", "not supported"},
		{map[string]string{"USE_STATSD": "false", "PORT": "http"}, "PORT", "integer"},
		{map[string]string{"USE_STATSD": "false", "GRPC_PORT": "70000"}, "GRPC_PORT", "between 0 and 65535"},
		{map[string]string{"USE_STATSD": "false", "GRPC_MAX_CONNECTION_AGE": "-1s"}, "GRPC_MAX_CONNECTION_AGE", "negative"},
		{map[string]string{"USE_STATSD": "false", "GRPC_MAX_CONNECTION_AGE_GRACE": "1 hour"}, "GRPC_MAX_CONNECTION_AGE_GRACE", "duration"},
		{map[string]string{"USE_STATSD": "false", "LOG_LEVEL": "loud"}, "LOG_LEVEL", "debug, info, warn or error"},
		{map[string]string{"USE_STATSD": "false", "LOG_FORMAT": "xml"}, "LOG_FORMAT", "text or json"},
		{map[string]string{"USE_STATSD": "false", "BACKEND_TYPE": "memcache"}, "BACKEND_TYPE", "memcache is not supported"},
		{map[string]string{"USE_STATSD": "false", "BACKEND_TYPE": "etcd"}, "BACKEND_TYPE", "must be redis"},
		{map[string]string{"USE_STATSD": "false", "REDIS_TYPE": "RING"}, "REDIS_TYPE", "SINGLE, CLUSTER or SENTINEL"},
		{map[string]string{"USE_STATSD": "false", "REDIS_SOCKET_TYPE": "udp"}, "REDIS_SOCKET_TYPE", "tcp or unix"},
		{map[string]string{"USE_STATSD": "false", "REDIS_TYPE": "sentinel", "REDIS_URL": "onlymaster"}, "REDIS_URL", "master's name and the sentinels"},
		{map[string]string{"USE_STATSD": "false", "REDIS_POOL_SIZE": "-1"}, "REDIS_POOL_SIZE", "between"},
		{map[string]string{"USE_STATSD": "false", "REDIS_PERSECOND": "true"}, "REDIS_PERSECOND", "not supported"},
		{map[string]string{"USE_STATSD": "false", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "true"}, "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "not supported"},
		{map[string]string{"USE_STATSD": "false", "REDIS_POOL_ON_EMPTY_BEHAVIOR": "CREATE"}, "REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT"},
		{map[string]string{"USE_STATSD": "false", "REDIS_TIMEOUT": "soon"}, "REDIS_TIMEOUT", "duration"},
		{map[string]string{"USE_STATSD": "false", "REDIS_TLS_CACERT": "ca.pem"}, "REDIS_TLS", "must be true"},
		{map[string]string{"USE_STATSD": "false", "NEAR_LIMIT_RATIO": "1.5"}, "NEAR_LIMIT_RATIO", "between 0 and 1"},
		{map[string]string{"USE_STATSD": "false", "EXPIRATION_JITTER_MAX_SECONDS": "5m"}, "EXPIRATION_JITTER_MAX_SECONDS", "integer"},
		{map[string]string{"USE_STATSD": "false", "LOCAL_CACHE_SIZE_IN_BYTES": "-5"}, "LOCAL_CACHE_SIZE_IN_BYTES", "between"},
		{map[string]string{"USE_STATSD": "false", "SHADOW_MODE": "yes"}, "SHADOW_MODE", "true or false"},
		{map[string]string{"USE_STATSD": "false", "QUOTA_MODE": "true"}, "QUOTA_MODE", "not supported"},
		{map[string]string{"USE_STATSD": "false", "RESPONSE_DYNAMIC_METADATA": "true"}, "RESPONSE_DYNAMIC_METADATA", "not supported"},
		{map[string]string{"USE_STATSD": "false", "TRACING_ENABLED": "true"}, "TRACING_ENABLED", "not supported"},
		{map[string]string{"USE_STATSD": "false", "TRACING_EXPORTER_PROTOCOL": "zipkin"}, "TRACING_EXPORTER_PROTOCOL", "http or grpc"},
		{map[string]string{"USE_STATSD": "false", "CONFIG_TYPE": "CONSUL"}, "CONFIG_TYPE", "FILE or GRPC_XDS_SOTW"},
		{map[string]string{"USE_STATSD": "false", "CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "1s"}, "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "XDS_CLIENT_BACKOFF"},
		{map[string]string{"USE_STATSD": "false", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "big"}, "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "number"},
		{map[string]string{"USE_STATSD": "false", "GRPC_SERVER_USE_TLS": "true"}, "GRPC_SERVER_TLS_CERT", "needs"},
		{map[string]string{"USE_STATSD": "false", "MEMCACHE_SRV_REFRESH": "often"}, "MEMCACHE_SRV_REFRESH", "duration"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := parseEnv(t, c.env)
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.File != envSource || !strings.HasPrefix(ce.Field, c.name) {
				t.Fatalf("%v: %v, want a *ConfigError of the environment naming %s", c.env, err, c.name)
			}
			msg := oneLine(err.Error())
			if msg != err.Error() || !strings.Contains(msg, c.want) {
				t.Fatalf("%v: %q, want one line with %q", c.env, err.Error(), c.want)
			}
		})
	}
}

// TestRatelimitEnvFlagsWin checks that flags given win over the
// variables.
func TestRatelimitEnvFlagsWin(t *testing.T) {
	env := map[string]string{
		"USE_STATSD": "false", "PORT": "9000", "GRPC_PORT": "9001", "LOG_LEVEL": "error", "USE_PROMETHEUS": "true",
		"RUNTIME_SUBDIRECTORY": "ratelimit", "GRPC_MAX_CONNECTION_AGE": "1m",
	}
	cfg, _, err := parseEnv(t, env, "--http-addr", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:2", "--metrics-addr", "",
		"--log-level", "debug", "--rules", "/etc/rules", "--grpc-max-connection-age", "2m", "--max-key-bytes", "64")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTPAddr != "127.0.0.1:1" || cfg.GRPCAddr != "127.0.0.1:2" || cfg.MetricsAddr != "" {
		t.Errorf("addresses %s %s %q: the flags' wanted", cfg.HTTPAddr, cfg.GRPCAddr, cfg.MetricsAddr)
	}
	if !cfg.Log.Enabled(context.Background(), slog.LevelDebug) {
		t.Error("--log-level debug lost to LOG_LEVEL")
	}
	if cfg.Runtime != nil || cfg.Envoy.RulesDir != "/etc/rules" {
		t.Errorf("rules %+v %q: --rules wanted", cfg.Runtime, cfg.Envoy.RulesDir)
	}
	if cfg.Servers.GRPCMaxConnectionAge != 2*time.Minute || cfg.Limits.MaxKeyBytes != 64 {
		t.Errorf("age %v, max key bytes %d: the flags' wanted", cfg.Servers.GRPCMaxConnectionAge, cfg.Limits.MaxKeyBytes)
	}
	// Unset variables keep their defaults beside the flags.
	if cfg.Backends.Redis.Addr != rlRedisURL || cfg.Servers.GRPCMaxConnectionAgeGrace != time.Hour {
		t.Errorf("defaults lost: %q %v", cfg.Backends.Redis.Addr, cfg.Servers.GRPCMaxConnectionAgeGrace)
	}
}

// TestRatelimitEnvWithConfigFile checks that --config ignores the
// variables, naming them in one warning.
func TestRatelimitEnvWithConfigFile(t *testing.T) {
	file := writeFile(t, t.TempDir(), "limiterd.yaml", "store: in_memory\n")
	cfg, log, err := parseEnv(t, map[string]string{"REDIS_URL": "redis:6379", "PORT": "9000", "USE_STATSD": "true"}, "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Store != "in_memory" || cfg.HTTPAddr != ":8080" || cfg.MetricsAddr != ":9091" {
		t.Errorf("the file's configuration wanted: %s %s %s", cfg.Store, cfg.HTTPAddr, cfg.MetricsAddr)
	}
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "variables=PORT,USE_STATSD,REDIS_URL") {
		t.Fatalf("want one warning naming the variables, got %q", log.String())
	}
}

// TestNoRatelimitEnvKeepsDefaults checks that without any of the
// variables limiterd's own defaults hold, and the log says nothing.
func TestNoRatelimitEnvKeepsDefaults(t *testing.T) {
	cfg, log, err := parseEnv(t, map[string]string{"LIMITERD_REDIS_PASSWORD": "x", "HOME": "/root"})
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	if cfg.Store != want.Store || cfg.HTTPAddr != want.HTTPAddr || cfg.GRPCAddr != want.GRPCAddr ||
		cfg.MetricsAddr != want.MetricsAddr || cfg.MetricsPath != "/metrics" || cfg.RLConfigAddr != "" ||
		cfg.Servers != want.Servers || cfg.Envoy.ExpirationJitterMax != 0 || cfg.Runtime != nil ||
		!cfg.Log.Enabled(context.Background(), slog.LevelInfo) {
		t.Fatalf("defaults changed: %+v", cfg)
	}
	if log.String() != "" {
		t.Fatalf("log %q, want nothing", log.String())
	}
}

// TestRatelimitVariablesComplete checks the list against
// envoyproxy/ratelimit's settings.go in the module cache, when it is
// there (scripts/compare-envoy-ratelimit fetches it).
func TestRatelimitVariablesComplete(t *testing.T) {
	modcache := os.Getenv("GOMODCACHE")
	if modcache == "" {
		modcache = filepath.Join(gopath(t), "pkg", "mod")
	}
	files, _ := filepath.Glob(filepath.Join(modcache, "github.com", "envoyproxy", "ratelimit@*", "src", "settings", "settings.go"))
	if len(files) == 0 {
		t.Skip("envoyproxy/ratelimit is not in the module cache")
	}
	sort.Strings(files)
	b, err := os.ReadFile(files[len(files)-1])
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, v := range ratelimitVariables {
		known[v] = true
	}
	for _, m := range regexp.MustCompile(`envconfig:"([A-Z0-9_]+)"`).FindAllStringSubmatch(string(b), -1) {
		if !known[m[1]] {
			t.Errorf("%s (%s) is not in ratelimitVariables", m[1], files[len(files)-1])
		}
	}
}

// gopath is GOPATH's first directory.
func gopath(t *testing.T) string {
	if p := os.Getenv("GOPATH"); p != "" {
		return filepath.SplitList(p)[0]
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Skip("no GOPATH and no home directory")
	}
	return filepath.Join(home, "go")
}

// setRatelimitEnv sets the variables a test of envoyproxy/ratelimit mode
// needs beside its own: no statsd, the start logged, and a Redis server of
// its own over TCP.
func setRatelimitEnv(t *testing.T) *redistest.Server {
	t.Helper()
	srv := redistest.StartServer(t)
	t.Setenv("USE_STATSD", "false")
	t.Setenv("LOG_LEVEL", "info")
	t.Setenv("REDIS_SOCKET_TYPE", "tcp")
	t.Setenv("REDIS_URL", srv.Addr())
	return srv
}
