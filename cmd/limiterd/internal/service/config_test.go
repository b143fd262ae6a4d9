package service

import (
	"errors"
	"strings"
	"testing"
)

func TestParseConfigReference(t *testing.T) {
	// The reference service's own example file is accepted as it is.
	cfg, err := ParseConfig("ref.yaml", []byte(`
store: "redis"
use_algo: "token_bucket"
metrics:
  use_prometheus: true
  port: 9091
algo_settings:
  capacity: 10
  rate: 0.1
backends:
  in_memory:
    default_ttl: 30 # seconds
    eviction_time: 120 # seconds
    shards_count: 256
  redis:
    addr: "redis:6379"
    password: "secret"
    db: 0
    default_ttl: 1000
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Store != "redis" || *cfg.AlgoSettings.Rate != 0.1 || cfg.Backends.Redis.Addr != "redis:6379" {
		t.Fatalf("decoded %+v", cfg)
	}
	p, scale, err := policyOf(cfg)
	if err != nil || scale != tokenScale || p.Limit != 10*tokenScale {
		t.Fatalf("policy %+v scale %d: %v", p, scale, err)
	}
}

func TestRedisPasswordFromEnvironment(t *testing.T) {
	cfg, err := ParseConfig("p.yaml", []byte("store: redis\nbackends:\n  redis: {password: infile}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RedisPassword() != "infile" {
		t.Fatalf("password %q", cfg.RedisPassword())
	}
	t.Setenv("LIMITERD_REDIS_PASSWORD", "fromenv")
	if cfg.RedisPassword() != "fromenv" {
		t.Fatalf("password %q, want the environment's", cfg.RedisPassword())
	}
}

func TestParseTokens(t *testing.T) {
	for in, want := range map[float64]int64{0: 0, 1: 1000, 0.1: 100, 0.0015: 2, 2.5: 2500, 1e-9: 1, 4.9e-7: 1, 1e-300: 1} {
		got, err := parseTokens(in)
		if err != nil || got != want {
			t.Errorf("parseTokens(%v) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []float64{-1, 2e12} {
		if _, err := parseTokens(bad); err == nil {
			t.Errorf("parseTokens(%v) accepted", bad)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("store: in_memory\nuse_algo: gcra\nalgo_settings: {capacity: 5, rate: 2}\n"))
	f.Add([]byte("use_algo: sliding_window\nalgo_settings: {window_size: 10, max_requests: 3}\n"))
	f.Add([]byte("backends:\n  redis: {cluster_addrs: [a, b]}\nstore: redis\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := ParseConfig("f.yaml", b)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q: want a one-line *ConfigError", err)
			}
			return
		}
		if _, _, err := policyOf(cfg); err != nil && strings.Contains(err.Error(), "\n") {
			t.Fatalf("policy error %q spans lines", err)
		}
	})
}
