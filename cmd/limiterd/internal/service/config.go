package service

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is limiterd's configuration: the reference service's file format,
// with a few additions (marked below). Every field has a default, so the
// zero file is a valid configuration.
type Config struct {
	// Store is "in_memory" (default) or "redis".
	Store string `yaml:"store"`
	// UseAlgo is the algorithm of POST /limit and ratelimiter.v1:
	// token_bucket (default), gcra, fixed_window, rolling_window,
	// sliding_window.
	UseAlgo      string       `yaml:"use_algo"`
	AlgoSettings AlgoSettings `yaml:"algo_settings"`
	Backends     Backends     `yaml:"backends"`
	Metrics      Metrics      `yaml:"metrics"`

	// Addition: what to do when the store fails or does not answer within
	// a second: fail_open (default), fail_closed (503, Unavailable) or
	// fallback (the local fallback: an in-memory limit at the configured
	// limit divided by replicas; local_fallback is its former name, still
	// accepted), the modes limit.FailOpen, FailClosed and FailFallback.
	OnStoreFailure string `yaml:"on_store_failure"`
	// Addition: the number of replicas sharing the store, for fallback.
	Replicas int `yaml:"replicas"`
	// Addition: the rate limit headers of POST /limit: draft (default),
	// trio, x or none.
	Headers string `yaml:"headers"`
	// Addition: the Envoy rate limit service's settings.
	Envoy Envoy `yaml:"envoy"`
	// Addition: TLS and mutual TLS on the gRPC port.
	GRPCTLS GRPCTLS `yaml:"grpc_tls"`
	// Addition: bounds on what a caller may send or make limiterd hold.
	Limits Limits `yaml:"limits"`
	// Addition: the servers' timeouts and gRPC settings.
	Servers Servers `yaml:"servers"`

	// Command holds the settings of the command line, which a file does
	// not set.
	Command `yaml:"-"`

	file string // the file it came from, "" for defaults
}

// AlgoSettings are the algorithm's parameters; which are needed depends on
// use_algo.
type AlgoSettings struct {
	// Capacity is the bucket size (token_bucket) or burst (gcra), in tokens.
	Capacity *float64 `yaml:"capacity"`
	// Rate is tokens per second (token_bucket, gcra).
	Rate *float64 `yaml:"rate"`
	// WindowSize is the window in seconds (the window algorithms).
	WindowSize *int64 `yaml:"window_size"`
	// MaxRequests is the cost admitted per window (the window algorithms).
	MaxRequests *int64 `yaml:"max_requests"`
}

// Backends configure the two stores.
type Backends struct {
	InMemory InMemory `yaml:"in_memory"`
	Redis    Redis    `yaml:"redis"`
}

// InMemory configures the in-memory store.
type InMemory struct {
	// DefaultTTL (seconds) is accepted for the reference's files; keys are
	// dropped when back at rest, which needs no TTL.
	DefaultTTL int64 `yaml:"default_ttl"`
	// EvictionTime is how often, in seconds, idle keys are cleaned up.
	EvictionTime int64 `yaml:"eviction_time"`
	// ShardsCount is the number of shards, a power of two.
	ShardsCount int64 `yaml:"shards_count"`
	// Addition: the most keys held; default 1,048,576.
	MaxKeys int64 `yaml:"max_keys"`
}

// Redis configures the Redis store.
type Redis struct {
	// Addr is the server of a single Redis.
	Addr string `yaml:"addr"`
	// Password may instead come from the environment: see PasswordEnv.
	Password string `yaml:"password"`
	// DB is the database number (single server only).
	DB int64 `yaml:"db"`
	// DefaultTTL (seconds) is accepted for the reference's files; every key
	// expires when back at rest.
	DefaultTTL int64 `yaml:"default_ttl"`
	// Addition: the nodes of a Redis Cluster; when set, Addr is ignored.
	ClusterAddrs []string `yaml:"cluster_addrs"`
	// Addition: the environment variable holding the password (default
	// LIMITERD_REDIS_PASSWORD), which wins over Password when set.
	PasswordEnv string `yaml:"password_env"`
	// Username goes with Password (REDIS_AUTH's user:password form).
	Username string `yaml:"username"`
	// Network is "tcp" (default) or "unix" (REDIS_SOCKET_TYPE).
	Network string `yaml:"network"`
	// SentinelMaster, when set, makes Addr/ClusterAddrs a list of Sentinel
	// servers watching this master (REDIS_TYPE=SENTINEL).
	SentinelMaster string `yaml:"sentinel_master"`
	// SentinelAddrs are the Sentinel servers.
	SentinelAddrs []string `yaml:"sentinel_addrs"`
	// SentinelPassword authenticates to the Sentinel servers, not to the
	// master (REDIS_SENTINEL_AUTH).
	SentinelPassword string `yaml:"sentinel_password"`
	// Timeout bounds go-redis's dials, reads and writes (REDIS_TIMEOUT);
	// 0 keeps go-redis's defaults. A decision's store call is bounded
	// apart from it (see on_store_failure).
	Timeout time.Duration `yaml:"timeout"`
	// PoolSize is the connections per node; 0 keeps go-redis's default
	// (REDIS_POOL_SIZE).
	PoolSize int64 `yaml:"pool_size"`
	// TLS connects to Redis over TLS (REDIS_TLS and its files).
	TLS RedisTLS `yaml:"tls"`
	// LocalAllowance decides hot keys from allowances leased from Redis
	// (redislimit.Options.LocalAllowance; env REDIS_LOCAL_ALLOWANCE).
	// Default false.
	LocalAllowance bool `yaml:"local_allowance"`
	// ColdLease, with LocalAllowance, also lends the keyed API's token
	// bucket and GCRA keys that are far from their limit, for this long
	// (redislimit.Options.ColdLease; env REDIS_LOCAL_ALLOWANCE_COLD_LEASE).
	// 0 (default): hot keys only; else from 1s to 1h.
	ColdLease time.Duration `yaml:"cold_lease"`
}

// RedisTLS is TLS towards Redis.
type RedisTLS struct {
	Enabled bool `yaml:"enabled"`
	// CAFile verifies the server; the system pool without it.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a client certificate.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// SkipHostnameVerification checks the server's certificate chain but
	// not the name it is for (REDIS_TLS_SKIP_HOSTNAME_VERIFICATION).
	SkipHostnameVerification bool `yaml:"skip_hostname_verification"`
}

// Metrics configures Prometheus.
type Metrics struct {
	UsePrometheus *bool `yaml:"use_prometheus"`
	Port          int64 `yaml:"port"`
}

// Envoy configures the Envoy rate limit service.
type Envoy struct {
	// RulesDir is the directory of rule files; --rules overrides it.
	RulesDir string `yaml:"rules_dir"`
	// StopIncrementWhenOverLimit is envoyproxy/ratelimit's
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT.
	StopIncrementWhenOverLimit bool `yaml:"stop_increment_when_over_limit"`
	// ShadowMode answers OK overall (its SHADOW_MODE).
	ShadowMode bool `yaml:"shadow_mode"`
	// KeyPrefix starts every counter key (its CACHE_KEY_PREFIX).
	KeyPrefix string `yaml:"key_prefix"`
	// XDS takes the rules from an xDS management server instead of
	// RulesDir.
	XDS XDS `yaml:"xds"`
	// NearLimitRatio is the share of a limit above which an admitted hit
	// counts as near the limit in the metrics (its NEAR_LIMIT_RATIO).
	// Default 0.8.
	NearLimitRatio float64 `yaml:"near_limit_ratio"`
	// ResponseHeaders adds rate limit headers to the Envoy API's answers
	// (its LIMIT_RESPONSE_HEADERS_ENABLED and LIMIT_*_HEADER).
	ResponseHeaders EnvoyHeaders `yaml:"response_headers"`
	// HealthyWithRulesLoaded reports unhealthy until at least one rule
	// file has loaded (its HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED).
	HealthyWithRulesLoaded bool `yaml:"healthy_with_at_least_one_config_loaded"`
	// MergeDomains merges rule files that name the same domain instead of
	// refusing them (its MERGE_DOMAIN_CONFIG).
	MergeDomains bool `yaml:"merge_domain_config"`
	// LocalCacheBytes sizes a local cache of keys over their limit, which
	// answers them without a store call until their window ends (its
	// LOCAL_CACHE_SIZE_IN_BYTES); 0 (default) turns it off.
	LocalCacheBytes int64 `yaml:"local_cache_size_in_bytes"`
	// ExpirationJitterMax adds up to this much, at random, to each counter
	// key's expiry (its EXPIRATION_JITTER_MAX_SECONDS). Default 0.
	ExpirationJitterMax time.Duration `yaml:"expiration_jitter_max"`
}

// EnvoyHeaders are the rate limit headers of the Envoy API's answers.
type EnvoyHeaders struct {
	Enabled bool `yaml:"enabled"`
	// Limit, Remaining and Reset are the headers' names; defaults
	// RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset.
	Limit     string `yaml:"limit"`
	Remaining string `yaml:"remaining"`
	Reset     string `yaml:"reset"`
}

// ConfigError is a configuration that limiterd refuses; its message is one
// line naming the file and the field.
type ConfigError struct {
	File, Field, Reason string
}

func (e *ConfigError) Error() string {
	file := e.File
	if file == "" {
		file = "(defaults)"
	}
	if e.Field == "" {
		return fmt.Sprintf("limiterd: config %s: %s", file, e.Reason)
	}
	return fmt.Sprintf("limiterd: config %s: %s: %s", file, e.Field, e.Reason)
}

// DefaultConfig is the configuration without a file or flags: in memory,
// a token bucket of 10 tokens refilled at 1 per second, listening on
// :8080 (REST), :8081 (gRPC) and :9091 (/metrics).
func DefaultConfig() Config { return defaultConfig() }

// defaultLocalAllowance is backends.redis.local_allowance's default: false,
// set by the package's tests to run them all with local allowances on.
var defaultLocalAllowance = false

func defaultConfig() Config {
	capacity, rate := 10.0, 1.0
	window, maxReq := int64(60), int64(100)
	return Config{
		Store:   "in_memory",
		UseAlgo: "token_bucket",
		AlgoSettings: AlgoSettings{
			Capacity: &capacity, Rate: &rate, WindowSize: &window, MaxRequests: &maxReq,
		},
		Backends: Backends{
			InMemory: InMemory{DefaultTTL: 30, EvictionTime: 120, ShardsCount: 256, MaxKeys: 1 << 20},
			Redis: Redis{Addr: "127.0.0.1:6379", DefaultTTL: 1000, PasswordEnv: "LIMITERD_REDIS_PASSWORD",
				LocalAllowance: defaultLocalAllowance},
		},
		Metrics:        Metrics{Port: 9091},
		OnStoreFailure: "fail_open",
		Replicas:       1,
		Headers:        "draft",
		Envoy: Envoy{
			XDS: defaultXDS(), NearLimitRatio: 0.8,
			ResponseHeaders: EnvoyHeaders{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"},
		},
		Limits:  defaultLimits(),
		Servers: defaultServers(),
		Command: defaultCommand(),
	}
}

// LoadConfig reads and validates file; "" gives the defaults.
func LoadConfig(file string) (Config, error) {
	cfg := defaultConfig()
	if file == "" {
		return cfg, cfg.Validate()
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return cfg, &ConfigError{File: file, Reason: err.Error()}
	}
	return ParseConfig(file, b)
}

// ParseConfig decodes a configuration file's content over the defaults and
// validates it.
func ParseConfig(file string, b []byte) (Config, error) {
	cfg := defaultConfig()
	cfg.file = file
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return cfg, &ConfigError{File: file, Reason: "bad YAML: " + oneLine(err.Error())}
	}
	if len(doc.Content) == 0 {
		return cfg, cfg.Validate()
	}
	root := doc.Content[0]
	if err := checkNode(file, "", root, configSchema); err != nil {
		return cfg, err
	}
	// The algorithm's parameters replace the defaults as a whole, so that a
	// file's algo_settings says everything its algorithm uses.
	if hasKey(root, "algo_settings") {
		cfg.AlgoSettings = AlgoSettings{}
	}
	if err := root.Decode(&cfg); err != nil {
		return cfg, &ConfigError{File: file, Reason: oneLine(err.Error())}
	}
	cfg.file = file
	return cfg, cfg.Validate()
}

func hasKey(m *yaml.Node, key string) bool {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return true
		}
	}
	return false
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// The kinds of values the schema allows.
const (
	kindString = "a string"
	kindNumber = "a number"
	kindInt    = "an integer"
	kindBool   = "true or false"
	kindList   = "a list of strings"
	kindDur    = "a duration such as 5s or 2m"
)

// configSchema is every key a file may have, with its kind or, for
// sections, its own schema.
var configSchema = map[string]any{
	"store": kindString, "use_algo": kindString, "on_store_failure": kindString,
	"replicas": kindInt, "headers": kindString,
	"algo_settings": map[string]any{
		"capacity": kindNumber, "rate": kindNumber, "window_size": kindInt, "max_requests": kindInt,
	},
	"backends": map[string]any{
		"in_memory": map[string]any{
			"default_ttl": kindInt, "eviction_time": kindInt, "shards_count": kindInt, "max_keys": kindInt,
		},
		"redis": map[string]any{
			"addr": kindString, "password": kindString, "db": kindInt, "default_ttl": kindInt,
			"cluster_addrs": kindList, "password_env": kindString,
			"username": kindString, "network": kindString, "sentinel_master": kindString,
			"sentinel_addrs": kindList, "pool_size": kindInt, "local_allowance": kindBool,
			"sentinel_password": kindString, "timeout": kindDur, "cold_lease": kindDur,
			"tls": map[string]any{
				"enabled": kindBool, "ca_file": kindString, "cert_file": kindString, "key_file": kindString,
				"skip_hostname_verification": kindBool,
			},
		},
	},
	"metrics": map[string]any{"use_prometheus": kindBool, "port": kindInt},
	"envoy": map[string]any{
		"rules_dir": kindString, "stop_increment_when_over_limit": kindBool,
		"shadow_mode": kindBool, "key_prefix": kindString, "near_limit_ratio": kindNumber,
		"healthy_with_at_least_one_config_loaded": kindBool, "merge_domain_config": kindBool,
		"local_cache_size_in_bytes": kindInt, "expiration_jitter_max": kindDur,
		"response_headers": map[string]any{
			"enabled": kindBool, "limit": kindString, "remaining": kindString, "reset": kindString,
		},
		"xds": map[string]any{
			"server_url": kindString, "node_id": kindString, "node_metadata": kindString, "headers": kindString,
			"use_tls": kindBool, "ca_file": kindString, "cert_file": kindString, "key_file": kindString,
			"server_san": kindString, "backoff_initial": kindString, "backoff_max": kindString,
			"backoff_factor": kindNumber, "backoff_jitter": kindBool, "max_msg_size": kindInt,
			"start_without_rules": kindBool,
		},
	},
	"grpc_tls": map[string]any{
		"cert_file": kindString, "key_file": kindString, "client_ca_file": kindString, "client_san": kindString,
	},
	"limits": map[string]any{
		"max_key_bytes": kindInt, "max_descriptors": kindInt, "max_descriptor_entries": kindInt,
		"max_body_bytes": kindInt, "max_header_bytes": kindInt, "max_metric_series": kindInt,
	},
	"servers": map[string]any{
		"read_header_timeout": kindDur, "read_timeout": kindDur, "write_timeout": kindDur,
		"idle_timeout": kindDur, "grpc_max_concurrent_streams": kindInt, "grpc_max_recv_msg_bytes": kindInt,
		"grpc_keepalive_min_time": kindDur, "grpc_max_connection_idle": kindDur,
		"grpc_handshake_timeout": kindDur, "grpc_max_connection_age": kindDur,
		"grpc_max_connection_age_grace": kindDur,
	},
}

// checkNode checks that n is a mapping whose keys and value kinds the
// schema allows.
func checkNode(file, path string, n *yaml.Node, schema map[string]any) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		field := path
		if field == "" {
			field = "(top level)"
		}
		return &ConfigError{File: file, Field: field, Reason: "must be a mapping of keys"}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		field := k.Value
		if path != "" {
			field = path + "." + k.Value
		}
		want, ok := schema[k.Value]
		if !ok {
			return &ConfigError{File: file, Field: field, Reason: "unknown key (known: " + knownKeys(schema) + ")"}
		}
		if sub, ok := want.(map[string]any); ok {
			if err := checkNode(file, field, v, sub); err != nil {
				return err
			}
			continue
		}
		if !kindMatches(v, want.(string)) {
			return &ConfigError{File: file, Field: field, Reason: fmt.Sprintf("must be %s, not %q", want, v.Value)}
		}
	}
	return nil
}

func knownKeys(schema map[string]any) string {
	keys := make([]string, 0, len(schema))
	for k := range schema {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

func kindMatches(v *yaml.Node, kind string) bool {
	if kind == kindList {
		if v.Kind != yaml.SequenceNode {
			return false
		}
		for _, e := range v.Content {
			if e.Kind != yaml.ScalarNode {
				return false
			}
		}
		return true
	}
	if v.Kind != yaml.ScalarNode {
		return false
	}
	switch kind {
	case kindNumber:
		f, err := strconv.ParseFloat(v.Value, 64)
		return (v.Tag == "!!int" || v.Tag == "!!float") && err == nil && !math.IsNaN(f) && !math.IsInf(f, 0)
	case kindInt:
		return v.Tag == "!!int"
	case kindBool:
		return v.Tag == "!!bool"
	case kindDur:
		_, err := time.ParseDuration(v.Value)
		return v.Tag == "!!str" && err == nil
	}
	return v.Tag == "!!str" || v.Tag == "!!int" || v.Tag == "!!float" // a string may look like a number
}

// errField builds a validation error of c's file. A configuration from
// envoyproxy/ratelimit's variables names the variable first.
func (c *Config) errField(field, format string, args ...any) error {
	if v, ok := fieldVariables[field]; ok && c.file == envSource {
		field = v + " (" + field + ")"
	}
	return &ConfigError{File: c.file, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// fieldVariables are the envoyproxy/ratelimit variables that set the
// fields whose values can be refused after they are read.
var fieldVariables = map[string]string{
	"backends.redis.addr":                   "REDIS_URL",
	"backends.redis.network":                "REDIS_SOCKET_TYPE",
	"backends.redis.sentinel_addrs":         "REDIS_URL",
	"backends.redis.sentinel_master":        "REDIS_URL",
	"backends.redis.pool_size":              "REDIS_POOL_SIZE",
	"backends.redis.timeout":                "REDIS_TIMEOUT",
	"backends.redis.tls.enabled":            "REDIS_TLS",
	"backends.redis.tls.ca_file":            "REDIS_TLS_CACERT",
	"backends.redis.tls.cert_file":          "REDIS_TLS_CLIENT_CERT",
	"backends.redis.tls.key_file":           "REDIS_TLS_CLIENT_KEY",
	"grpc_tls":                              "GRPC_SERVER_TLS_CERT",
	"grpc_tls.cert_file":                    "GRPC_SERVER_TLS_CERT",
	"grpc_tls.key_file":                     "GRPC_SERVER_TLS_KEY",
	"grpc_tls.client_ca_file":               "GRPC_CLIENT_TLS_CACERT",
	"grpc_tls.client_san":                   "GRPC_CLIENT_TLS_SAN",
	"servers.grpc_max_connection_age":       "GRPC_MAX_CONNECTION_AGE",
	"servers.grpc_max_connection_age_grace": "GRPC_MAX_CONNECTION_AGE_GRACE",
	"envoy.near_limit_ratio":                "NEAR_LIMIT_RATIO",
	"envoy.local_cache_size_in_bytes":       "LOCAL_CACHE_SIZE_IN_BYTES",
	"envoy.expiration_jitter_max":           "EXPIRATION_JITTER_MAX_SECONDS",
	"envoy.xds":                             "CONFIG_GRPC_XDS_SERVER_URL",
	"envoy.xds.server_url":                  "CONFIG_GRPC_XDS_SERVER_URL",
	"envoy.xds.node_metadata":               "CONFIG_GRPC_XDS_NODE_METADATA",
	"envoy.xds.headers":                     "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
	"envoy.xds.use_tls":                     "CONFIG_GRPC_XDS_SERVER_USE_TLS",
	"envoy.xds.cert_file":                   "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
	"envoy.xds.backoff_initial":             "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
	"envoy.xds.backoff_factor":              "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
	"envoy.xds.max_msg_size":                "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
}

// Validate checks the values: the algorithm and the parameters it needs
// (present and positive), the store and its backend's settings.
func (c *Config) Validate() error {
	return firstError(c.validateAlgo, c.validateStore, c.validateOthers, c.validateRanges, c.validateGRPCTLS, c.validateXDS, c.validateEnvoyHeaders)
}

func firstError(fns ...func() error) error {
	for _, f := range fns {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

func (c *Config) validateAlgo() error {
	a := &c.AlgoSettings
	positiveFloat := func(field string, p *float64) error {
		switch {
		case p == nil:
			return c.errField("algo_settings."+field, "missing: %s needs it", c.UseAlgo)
		case !(*p > 0) || math.IsInf(*p, 0):
			return c.errField("algo_settings."+field, "must be positive, not %v", *p)
		}
		return nil
	}
	positiveInt := func(field string, p *int64) error {
		switch {
		case p == nil:
			return c.errField("algo_settings."+field, "missing: %s needs it", c.UseAlgo)
		case *p <= 0:
			return c.errField("algo_settings."+field, "must be positive, not %d", *p)
		}
		return nil
	}
	switch c.UseAlgo {
	case "token_bucket", "gcra":
		return firstError(
			func() error { return positiveFloat("capacity", a.Capacity) },
			func() error { return positiveFloat("rate", a.Rate) },
		)
	case "fixed_window", "rolling_window", "sliding_window":
		return firstError(
			func() error { return positiveInt("window_size", a.WindowSize) },
			func() error { return positiveInt("max_requests", a.MaxRequests) },
		)
	}
	return c.errField("use_algo", "unknown algorithm %q (want token_bucket, gcra, fixed_window, rolling_window or sliding_window)", c.UseAlgo)
}

func (c *Config) validateStore() error {
	m, r := &c.Backends.InMemory, &c.Backends.Redis
	switch c.Store {
	case "in_memory":
		switch {
		case m.ShardsCount <= 0 || m.ShardsCount&(m.ShardsCount-1) != 0 || m.ShardsCount > 1<<16:
			return c.errField("backends.in_memory.shards_count", "must be a power of two up to 65536, not %d", m.ShardsCount)
		case m.DefaultTTL <= 0:
			return c.errField("backends.in_memory.default_ttl", "must be positive, not %d", m.DefaultTTL)
		case m.EvictionTime <= 0:
			return c.errField("backends.in_memory.eviction_time", "must be positive, not %d", m.EvictionTime)
		case m.MaxKeys <= 0:
			return c.errField("backends.in_memory.max_keys", "must be positive, not %d", m.MaxKeys)
		}
	case "redis":
		switch {
		case r.Addr == "" && len(r.ClusterAddrs) == 0 && r.SentinelMaster == "":
			return c.errField("backends.redis.addr", "missing: the redis store needs an address")
		case r.Network != "" && r.Network != "tcp" && r.Network != "unix":
			return c.errField("backends.redis.network", "must be tcp or unix, not %q", r.Network)
		case r.Network == "unix" && (len(r.ClusterAddrs) > 0 || r.SentinelMaster != ""):
			return c.errField("backends.redis.network", "unix is for a single server's socket, not with cluster_addrs or sentinel_master")
		case r.SentinelMaster != "" && len(r.SentinelAddrs) == 0:
			return c.errField("backends.redis.sentinel_addrs", "missing: sentinel_master needs the Sentinel servers")
		case r.SentinelMaster == "" && len(r.SentinelAddrs) > 0:
			return c.errField("backends.redis.sentinel_master", "missing: sentinel_addrs needs the master's name")
		case r.SentinelMaster != "" && len(r.ClusterAddrs) > 0:
			return c.errField("backends.redis.sentinel_master", "set with cluster_addrs: a cluster has no Sentinel")
		case r.Timeout < 0 || r.Timeout > time.Hour:
			return c.errField("backends.redis.timeout", "must be between 0 and 1h, not %v", r.Timeout)
		case r.ColdLease != 0 && (r.ColdLease < time.Second || r.ColdLease > time.Hour):
			return c.errField("backends.redis.cold_lease", "must be 0 (off) or from 1s to 1h, not %v", r.ColdLease)
		case r.ColdLease != 0 && !r.LocalAllowance:
			return c.errField("backends.redis.cold_lease", "needs backends.redis.local_allowance: true")
		case !r.TLS.Enabled && (r.TLS.CAFile != "" || r.TLS.CertFile != "" || r.TLS.KeyFile != "" || r.TLS.SkipHostnameVerification):
			return c.errField("backends.redis.tls.enabled", "must be true with ca_file, cert_file, key_file or skip_hostname_verification")
		case (r.TLS.CertFile == "") != (r.TLS.KeyFile == ""):
			return c.errField("backends.redis.tls.cert_file", "cert_file and key_file go together")
		case r.DB < 0 || r.DB > 1<<20:
			return c.errField("backends.redis.db", "must be 0 or more, not %d", r.DB)
		case r.DB != 0 && len(r.ClusterAddrs) > 0:
			return c.errField("backends.redis.db", "must be 0 with cluster_addrs: a cluster has one database")
		case r.DefaultTTL <= 0:
			return c.errField("backends.redis.default_ttl", "must be positive, not %d", r.DefaultTTL)
		}
	default:
		return c.errField("store", "unknown store %q (want in_memory or redis)", c.Store)
	}
	return nil
}

func (c *Config) validateOthers() error {
	switch {
	case c.Metrics.Port < 0 || c.Metrics.Port > 65535:
		return c.errField("metrics.port", "must be a TCP port, not %d", c.Metrics.Port)
	case !validFailureMode(c.OnStoreFailure):
		return c.errField("on_store_failure", "unknown policy %q (want fail_open, fail_closed or fallback)", c.OnStoreFailure)
	case c.Replicas <= 0:
		return c.errField("replicas", "must be positive, not %d", c.Replicas)
	}
	switch strings.ToLower(c.Headers) {
	case "draft", "trio", "x", "none":
	default:
		return c.errField("headers", "unknown format %q (want draft, trio, x or none)", c.Headers)
	}
	return nil
}

// RedisPassword is the password from the environment variable PasswordEnv
// names when it is set, else the file's.
func (c *Config) RedisPassword() string {
	if c.Backends.Redis.PasswordEnv != "" {
		if p, ok := os.LookupEnv(c.Backends.Redis.PasswordEnv); ok {
			return p
		}
	}
	return c.Backends.Redis.Password
}
