package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// Azurite's well-known development account.
const (
	azuriteAccount = "devstoreaccount1"
	azuriteKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// TestScenarioRedis runs the library half of the scenario with the leases
// in Redis (BATCHER_REDIS_ADDR, as scripts/test sets it).
func TestScenarioRedis(t *testing.T) {
	addr := os.Getenv("BATCHER_REDIS_ADDR")
	reachable(t, "BATCHER_REDIS_ADDR", addr)
	cfg := storeConfig()
	cfg.store, cfg.redisAddr = "redis", addr
	cfg.redisPrefix = fmt.Sprintf("sample-test-%d", time.Now().UnixNano())
	t.Cleanup(func() { dropKeys(t, addr, cfg.redisPrefix) })
	checkStoreRun(t, cfg)
}

// dropKeys deletes the keys the run left under prefix (the partition set;
// leases and demands are gone once the replicas stop), since the server
// may be a developer's own.
func dropKeys(t *testing.T, addr, prefix string) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "{"+prefix+"}*").Result()
	if err == nil && len(keys) > 0 {
		err = c.Del(ctx, keys...).Err()
	}
	if err != nil {
		t.Logf("cleaning up redis keys under %s: %v", prefix, err)
	}
}

// TestScenarioAzurite runs the library half of the scenario with the
// leases in Azurite (BATCHER_AZURITE_URL, as scripts/test sets it), through
// the account-key flags.
func TestScenarioAzurite(t *testing.T) {
	endpoint := os.Getenv("BATCHER_AZURITE_URL")
	host := ""
	if u, err := url.Parse(endpoint); err == nil {
		host = u.Host
	}
	reachable(t, "BATCHER_AZURITE_URL", host)
	cfg := storeConfig()
	cfg.store, cfg.azureAccount, cfg.azureKey, cfg.azureServiceURL = "azure", azuriteAccount, azuriteKey, endpoint
	cfg.azureContainer = fmt.Sprintf("sample-test-%d", time.Now().UnixNano())
	checkStoreRun(t, cfg)
}

// storeConfig is a short run with the library only.
func storeConfig() config {
	cfg := defaultConfig()
	cfg.duration = 4 * time.Second
	cfg.compare = false
	cfg.calibrate = false // the run's latency is not checked here
	cfg.report = ""
	return cfg
}

// checkStoreRun runs cfg and checks that every record was written with no
// 429.
func checkStoreRun(t *testing.T, cfg config) {
	t.Helper()
	var logs, out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	runs, err := demo(ctx, cfg, zerolog.New(zerolog.SyncWriter(&logs)).Level(zerolog.WarnLevel), &out)
	if err != nil {
		t.Fatalf("demo: %v\nlogs:\n%s", err, logs.String())
	}
	t.Logf("summary:\n%s", out.String())
	checkJobs(t, runs[0])
	if s := summarise(runs[0]); s.Throttled != 0 {
		t.Errorf("%d 429s with the library, want 0", s.Throttled)
	}
}

// reachable ends the test when the server at hostport (from env) does not
// accept connections: it fails under CI=true, where the integration tests
// must run, and skips elsewhere.
func reachable(t *testing.T, env, hostport string) {
	t.Helper()
	err := fmt.Errorf("%s is not set", env)
	if hostport != "" {
		var c net.Conn
		if c, err = net.DialTimeout("tcp", hostport, 2*time.Second); err == nil {
			c.Close()
			return
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%v (CI=true: the store integration tests must run; scripts/test starts the servers)", err)
	}
	t.Skipf("%v; run scripts/test, which starts the servers", err)
}
