package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/limit/redislimit"
	"github.com/redis/go-redis/v9"
)

// singleFactory gives n clients of the shared server, deciding at the
// suite's fake time.
func singleFactory(t *testing.T, clock limit.Clock, n int) []limit.Store {
	stores := make([]limit.Store, n)
	var prefix string
	for i := range stores {
		c := connect(t)
		if i == 0 {
			prefix = testPrefix(t, c)
		}
		s, err := redislimit.New(c, redislimit.Options{Prefix: prefix, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = s
	}
	return stores
}

func TestConformanceSingleServer(t *testing.T) {
	limittest.Run(t, singleFactory)
}

func TestConformanceCluster(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
	limittest.Run(t, func(t *testing.T, clock limit.Clock, n int) []limit.Store {
		stores := make([]limit.Store, n)
		var prefix string
		for i := range stores {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: 80})
			t.Cleanup(func() { c.Close() })
			if i == 0 {
				prefix = testPrefix(t, c)
			}
			s, err := redislimit.New(c, redislimit.Options{Prefix: prefix, Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			stores[i] = s
		}
		return stores
	})
	t.Run("CrossSlot", func(t *testing.T) {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		defer c.Close()
		s, _ := redislimit.New(c, redislimit.Options{Prefix: testPrefix(t, c)})
		p := limit.FixedWindow(5, time.Minute).Named("x")
		// Unrelated keys hash to different slots (these two do: checked with
		// CLUSTER KEYSLOT), and a cluster refuses a script over both.
		reqs := []limit.Request{{Key: "alice", Policy: p, Cost: 1}, {Key: "bob", Policy: p, Cost: 1}}
		_, err := s.AllowAll(context.Background(), reqs, nil)
		var cse *redislimit.CrossSlotError
		if !errors.As(err, &cse) {
			t.Fatalf("AllowAll over two slots: %v", err)
		}
		reqs[0].Key, reqs[1].Key = "{team}:alice", "{team}:bob"
		out, err := s.AllowAll(context.Background(), reqs, nil)
		if err != nil || !limit.Combine(out).Allowed {
			t.Fatalf("AllowAll over one tag: %+v %v", out, err)
		}
	})
}

func TestKeys(t *testing.T) {
	s, _ := redislimit.New(redis.NewClient(&redis.Options{}), redislimit.Options{})
	p := limit.GCRA(limit.PerSecond(1), 1).Named("per-user")
	for key, want := range map[string]string{
		"alice":         "limit:{alice}:per-user:gcra",
		"{t1}:alice":    "limit:{t1}:alice:per-user:gcra",
		"{}alice":       "limit:{{}alice}:per-user:gcra",
		"a{b}c":         "limit:a{b}c:per-user:gcra",
		"10.0.0.1/32{}": "limit:{10.0.0.1/32{}}:per-user:gcra",
		"a}b":           "limit:{a}b}:per-user:gcra",
		"}x":            "limit:{\\" + fnv64a("}x") + "}}x:per-user:gcra",
		"":              "limit:{\\" + fnv64a("") + "}:per-user:gcra",
		"\\a":           "limit:{\\" + fnv64a("\\a") + "}\\a:per-user:gcra",
	} {
		if got := s.Key(key, p); got != want {
			t.Errorf("Key(%q) = %q, want %q", key, got, want)
		}
	}
}

// fnv64a is the 64-bit FNV-1a hash of s in 16 hex digits.
func fnv64a(s string) string {
	h := fnv.New64a()
	h.Write([]byte(s))
	return fmt.Sprintf("%016x", h.Sum64())
}
