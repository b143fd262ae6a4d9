package redislimit_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/redislimit"
	"github.com/redis/go-redis/v9"
)

// keySlot is Redis Cluster's slot of a key: CRC16 (XMODEM) of its hash tag,
// the bytes between the first '{' and the first '}' after it when there
// are any, else of the whole key, modulo 16384.
func keySlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

// oddKeys are key strings around the hash tag rules: empty, braces alone
// and unbalanced, empty tags, leading backslashes.
var oddKeys = []string{"", "}", "{", "}x", "{}x}", "{}", "}{", "}{}", "x}", "\\", "\\x", "\\}x",
	"{}alice", "a{b}c", "{t1}:alice", "a}b", "}}", "{{}}", "10.0.0.1/32{}"}

// FuzzKeysShareSlot checks, for any key string, that the Redis keys of all
// the policies of one key fall in one cluster slot, and that two different
// keys without a tag of their own never share a Redis key.
func FuzzKeysShareSlot(f *testing.F) {
	for _, k := range oddKeys {
		f.Add(k, "x")
	}
	s, err := redislimit.New(redis.NewClient(&redis.Options{}), redislimit.Options{})
	if err != nil {
		f.Fatal(err)
	}
	policies := []limit.Policy{
		limit.GCRA(limit.PerSecond(1), 1).Named("per-user"),
		limit.FixedWindow(5, time.Minute).Named("a"),
		limit.TokenBucket(5, limit.PerSecond(1)),
	}
	hasTag := func(k string) bool {
		i := strings.IndexByte(k, '{')
		return i >= 0 && strings.IndexByte(k[i+1:], '}') > 0
	}
	f.Fuzz(func(t *testing.T, key, other string) {
		slot := keySlot(s.Key(key, policies[0]))
		for _, p := range policies[1:] {
			if got := keySlot(s.Key(key, p)); got != slot {
				t.Fatalf("key %q: %q in slot %d, %q in slot %d", key,
					s.Key(key, policies[0]), slot, s.Key(key, p), got)
			}
		}
		if key != other && !hasTag(key) && !hasTag(other) && s.Key(key, policies[0]) == s.Key(other, policies[0]) {
			t.Fatalf("keys %q and %q share the Redis key %q", key, other, s.Key(key, policies[0]))
		}
	})
}

// TestClusterPoliciesOfOneKey decides two policies of every odd key string
// together on a three-node cluster: each pair is one script in one slot.
// It first checks the fuzz test's keySlot against CLUSTER KEYSLOT.
func TestClusterPoliciesOfOneKey(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { c.Close() })
	a := limit.FixedWindow(5, time.Hour).Named("a")
	b := limit.TokenBucket(5, limit.PerHour(1)).Named("b")
	t.Run("KeySlot", func(t *testing.T) { // the fuzz test's slot is Redis's
		s, _ := redislimit.New(c, redislimit.Options{})
		for _, k := range oddKeys {
			for _, rk := range []string{k, s.Key(k, a), s.Key(k, b)} {
				want, err := c.ClusterKeySlot(context.Background(), rk).Result()
				if got := keySlot(rk); err != nil || int64(got) != want {
					t.Errorf("keySlot(%q) = %d, CLUSTER KEYSLOT says %d, %v", rk, got, want, err)
				}
			}
		}
	})
	for i, k := range oddKeys {
		// A prefix per key: a key in braces names the state of the key
		// inside them ("{}" and "{{}}"), which is not what this tests.
		s, err := redislimit.New(c, redislimit.Options{Prefix: "k" + strconv.Itoa(i) + ":"})
		if err != nil {
			t.Fatal(err)
		}
		reqs := []limit.Request{{Key: k, Policy: a, Cost: 1}, {Key: k, Policy: b, Cost: 2}}
		out, err := s.AllowAll(context.Background(), reqs, nil)
		if err != nil || !limit.Combine(out).Allowed || out[0].Remaining != 4 || out[1].Remaining != 3 {
			t.Errorf("AllowAll on two policies of key %q: %+v, %v", k, out, err)
		}
	}
}
