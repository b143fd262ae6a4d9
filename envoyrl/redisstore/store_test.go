package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/costwise/batcher/envoyrl"
	"github.com/costwise/batcher/envoyrl/redisstore"
	"github.com/costwise/batcher/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const rules = `
domain: rs
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 50}
  - key: global
    rate_limit: {unit: hour, requests_per_unit: 1000}
`

// backend is a Redis a test runs against.
type backend struct {
	name   string
	client func(t *testing.T) redis.UniversalClient
}

var backends = []backend{
	{"single", func(t *testing.T) redis.UniversalClient { return redistest.Shared(t) }},
	{"cluster", func(t *testing.T) redis.UniversalClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.StartCluster(t, 3)})
		t.Cleanup(func() { c.Close() })
		return c
	}},
}

func newService(t *testing.T, c redis.UniversalClient, opts envoyrl.Options) (*envoyrl.Service, *redisstore.Store) {
	t.Helper()
	r, err := envoyrl.Parse([]envoyrl.File{{Name: "rules.yaml", Content: []byte(rules)}})
	if err != nil {
		t.Fatal(err)
	}
	// REDISSTORE_TEST_LOCAL_ALLOWANCE=true runs these tests with local
	// allowances on.
	st := redisstore.New(c, redisstore.Options{LocalAllowance: os.Getenv("REDISSTORE_TEST_LOCAL_ALLOWANCE") == "true"})
	t.Cleanup(func() { st.Close() })
	opts.KeyPrefix = "test-" + uuid.NewString() + "_"
	s := envoyrl.NewService(st, opts)
	s.SetRules(r)
	return s, st
}

func req(hits uint32, kv ...string) *rlsv3.RateLimitRequest {
	r := &rlsv3.RateLimitRequest{Domain: "rs", HitsAddend: hits}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Descriptors = append(r.Descriptors, &rlv3.RateLimitDescriptor{
			Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: kv[i], Value: kv[i+1]}},
		})
	}
	return r
}

func TestRedisStore(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			c := b.client(t)
			t.Run("counts", func(t *testing.T) { testCounts(t, c) })
			t.Run("concurrent exact", func(t *testing.T) { testConcurrentExact(t, c) })
			t.Run("expiry", func(t *testing.T) { testExpiry(t, c) })
			t.Run("script reload", func(t *testing.T) { testScriptReload(t, c) })
			if b.name == "cluster" {
				t.Run("slots", func(t *testing.T) { testSlotsAgreeWithRedis(t, c) })
			}
		})
	}
}

func testCounts(t *testing.T, c redis.UniversalClient) {
	s, _ := newService(t, c, envoyrl.Options{})
	ctx := context.Background()
	redistest.AwayFromWindowEdge(time.Minute, 5*time.Second)
	// Two descriptors on one counter in one request count one after the other.
	resp, err := s.ShouldRateLimit(ctx, req(10, "user", "a", "user", "a", "user", "b"))
	if err != nil {
		t.Fatal(err)
	}
	got := []uint32{resp.Statuses[0].LimitRemaining, resp.Statuses[1].LimitRemaining, resp.Statuses[2].LimitRemaining}
	if got[0] != 40 || got[1] != 30 || got[2] != 40 {
		t.Fatalf("remaining %v, want [40 30 40]", got)
	}
	resp, err = s.ShouldRateLimit(ctx, req(31, "user", "a"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("81 of 50: %v", resp.OverallCode)
	}
}

func testConcurrentExact(t *testing.T, c redis.UniversalClient) {
	s, _ := newService(t, c, envoyrl.Options{})
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				// Every request spends on its own user counter and on the
				// shared global one; the batches mix both.
				resp, err := s.ShouldRateLimit(context.Background(), req(1, "user", fmt.Sprint(g), "global", "g"))
				if err != nil {
					t.Error(err)
					return
				}
				if resp.Statuses[1].Code == rlsv3.RateLimitResponse_OK {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	// 1280 hits on a limit of 1000 an hour: exactly 1000 under it, unless the
	// test straddles an hour boundary, when both windows admit.
	if n := admitted.Load(); n != 1000 && n != 1280 {
		t.Fatalf("%d hits admitted on the global counter, want exactly 1000", n)
	}
}

func testExpiry(t *testing.T, c redis.UniversalClient) {
	st := redisstore.New(c, redisstore.Options{})
	defer st.Close()
	key := "test-expiry-" + uuid.NewString()
	t.Cleanup(func() { c.Del(context.Background(), key) })
	cs := []envoyrl.Counter{{Key: key, Hits: 3, TTL: 30 * time.Second}}
	if err := st.Add(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	ttl := c.PTTL(context.Background(), key).Val()
	if cs[0].Count != 3 || ttl <= 25*time.Second || ttl > 30*time.Second {
		t.Fatalf("count %d ttl %v, want 3 and about 30 s", cs[0].Count, ttl)
	}
	// The store now takes the counter to exist; deleted behind its back, it
	// is created again with its expiry.
	if err := c.Del(context.Background(), key).Err(); err != nil {
		t.Fatal(err)
	}
	cs = []envoyrl.Counter{{Key: key, Hits: 2, TTL: 30 * time.Second}, {Key: key, Hits: 1, TTL: 30 * time.Second}}
	if err := st.Add(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	ttl = c.PTTL(context.Background(), key).Val()
	if cs[0].Count != 2 || cs[1].Count != 3 || ttl <= 25*time.Second || ttl > 30*time.Second {
		t.Fatalf("recreated: counts %d %d ttl %v, want 2 3 and about 30 s", cs[0].Count, cs[1].Count, ttl)
	}
	got := []envoyrl.Counter{{Key: key}, {Key: key + "-absent"}}
	if err := st.Get(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	if got[0].Count != 3 || got[1].Count != 0 {
		t.Fatalf("Get: %d %d, want 3 0", got[0].Count, got[1].Count)
	}
}

func testScriptReload(t *testing.T, c redis.UniversalClient) {
	s, _ := newService(t, c, envoyrl.Options{})
	if err := c.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ShouldRateLimit(context.Background(), req(1, "user", "reload")); err != nil {
		t.Fatalf("after SCRIPT FLUSH: %v", err)
	}
}

func TestRedisDownIsAStoreError(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	s, _ := newService(t, c, envoyrl.Options{})
	if _, err := s.ShouldRateLimit(context.Background(), req(1, "user", "x")); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := s.ShouldRateLimit(ctx, req(1, "user", "x"))
	var se *envoyrl.StoreError
	if !errors.As(err, &se) {
		t.Fatalf("with Redis down: %v, want a *envoyrl.StoreError", err)
	}
}

func TestSlot(t *testing.T) {
	// Known slots from the Redis Cluster specification's examples and
	// CLUSTER KEYSLOT.
	for key, want := range map[string]uint16{
		"123456789":  12739, // the CRC16 check value 0x31C3 modulo 16384
		"{user1000}": redisstore.Slot("user1000"),
		"a{b}c":      redisstore.Slot("b"),
		"a{}c":       redisstore.Slot("a{}c"),
	} {
		if got := redisstore.Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}

func testSlotsAgreeWithRedis(t *testing.T, c redis.UniversalClient) {
	for _, key := range []string{"foo", "rs_user_a_1700000000", "x{y}z", "{}", "{a}{b}"} {
		want, err := c.Do(context.Background(), "CLUSTER", "KEYSLOT", key).Int()
		if err != nil {
			t.Fatal(err)
		}
		if got := redisstore.Slot(key); int(got) != want {
			t.Errorf("Slot(%q) = %d, Redis says %d", key, got, want)
		}
	}
}
