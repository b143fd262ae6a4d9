package service

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	ratelimiterv1 "github.com/costwise/batcher/api/ratelimiter/v1"
)

// The promises of docs/limiterd.md's row "keys held in memory, per memory
// store | 1,048,576 | backends.in_memory.max_keys | keyed: keys at rest
// dropped first, then the lossy eviction of one that spent least
// (counted)", for the keyed API (POST /limit and ratelimiter.v1). A key at
// rest is one whose bucket has refilled to full: nothing to lose.

// keyedFlood is limiterd with a token bucket of 1,000 tokens refilled at 1
// token/s and a keyed memory store of max_keys keys: a key that spent 1,000
// tokens is active for 1,000 s, one that spent 2 comes to rest in 2 s. The
// cleanup runs hourly, so that only new keys make room.
type keyedFlood struct {
	t     *testing.T
	p     *proc
	allow ratelimiterv1.RateLimiterClient
	ctx   context.Context
	n     int // calls made, to alternate the APIs
}

func newKeyedFlood(t *testing.T, maxKeys, shards int) *keyedFlood {
	p := start(t, fmt.Sprintf("use_algo: token_bucket\nalgo_settings: {capacity: 1000, rate: 1}\n"+
		"backends:\n  in_memory: {max_keys: %d, shards_count: %d, eviction_time: 3600}\n", maxKeys, shards))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return &keyedFlood{t: t, p: p, allow: ratelimiterv1.NewRateLimiterClient(dial(t, p.grpc)), ctx: ctx}
}

// spend spends tokens on a new key, by POST /limit and ratelimiter.v1 in
// turn, and requires it admitted.
func (f *keyedFlood) spend(key string, tokens int) {
	f.t.Helper()
	f.n++
	if f.n%2 == 0 {
		r, err := f.allow.Allow(f.ctx, &ratelimiterv1.AllowRequest{Key: key, Tokens: float64(tokens)})
		if err != nil || !r.GetAllowed() {
			f.t.Fatalf("ratelimiter.v1 Allow %s, %d tokens: %v, %v; want allowed", key, tokens, r, err)
		}
		return
	}
	resp := f.p.post("/limit", "", "X-Client-Key", key, "X-Required-Tokens", strconv.Itoa(tokens))
	if resp.StatusCode != http.StatusOK {
		f.t.Fatalf("POST /limit %s, %d tokens: %d %s; want 200", key, tokens, resp.StatusCode, body(f.t, resp))
	}
}

// remaining looks at key (X-Required-Tokens: 0) and returns its whole
// tokens left: 1,000 for a key at rest or not held.
func (f *keyedFlood) remaining(key string) int64 {
	f.t.Helper()
	_, a := limitCall(f.t, f.p, key, "0")
	return a.remaining
}

// held is limiterd_memory_keys{store="keyed"}.
func (f *keyedFlood) held() int {
	f.t.Helper()
	return int(gaugeOf(f.t, f.p.metricsText(), `limiterd_memory_keys{store="keyed"}`))
}

// TestPromiseMaxKeysAtRestFirst: a keyed memory store of 64 keys holds 56
// active keys and 8 at rest; 8 new keys take the places of the 8 at rest,
// and every active key keeps what it spent (a look says it has next to
// nothing left). Then 64 more new keys, with no key at rest, keep the
// store at 64 keys. The store is never over max_keys.
func TestPromiseMaxKeysAtRestFirst(t *testing.T) {
	const maxKeys, atRest = 64, 8
	f := newKeyedFlood(t, maxKeys, 16)
	var active []string
	for i := range maxKeys - atRest {
		active = append(active, "active-"+strconv.Itoa(i))
		f.spend(active[i], 1000)
	}
	var resting []string
	for i := range atRest {
		resting = append(resting, "resting-"+strconv.Itoa(i))
		f.spend(resting[i], 2)
	}
	if n := f.held(); n != maxKeys {
		t.Fatalf("%d keys held after %d keys spent, want %d (the keys spending 2 tokens came to rest before the last was made?)", n, maxKeys, maxKeys)
	}
	waitFor(t, "the keys that spent 2 tokens back at rest", func() bool {
		for _, k := range resting {
			if f.remaining(k) != 1000 {
				return false
			}
		}
		return true
	})
	if n := f.held(); n != maxKeys {
		t.Fatalf("%d keys held once %d of them are at rest, want %d: looks must not drop or add keys", n, atRest, maxKeys)
	}
	for i := range atRest {
		k := "new-" + strconv.Itoa(i)
		active = append(active, k)
		f.spend(k, 1000)
		if n := f.held(); n > maxKeys {
			t.Fatalf("%d keys held after new key %d, want at most max_keys %d", n, i+1, maxKeys)
		}
	}
	for _, k := range active {
		if r := f.remaining(k); r > 500 {
			t.Fatalf("active key %s forgotten (a look says %d tokens left; it spent 1,000) while %d keys were at rest: keys at rest must go first",
				k, r, atRest)
		}
	}
	for i := range maxKeys {
		f.spend("flood-"+strconv.Itoa(i), 1000)
		if n := f.held(); n > maxKeys {
			t.Fatalf("%d keys held after flood key %d, want at most max_keys %d", n, i+1, maxKeys)
		}
	}
	if n := f.held(); n != maxKeys {
		t.Fatalf("%d keys held after the flood, want max_keys %d", n, maxKeys)
	}
}

// TestPromiseMaxKeysEvictsSpentLeast: with max_keys 4 (one shard, so that
// the eviction's sample sees every key) and every key active, a new key
// evicts the one that spent least, though it was used last, and the keys
// that spent more keep what they spent.
func TestPromiseMaxKeysEvictsSpentLeast(t *testing.T) {
	f := newKeyedFlood(t, 4, 1)
	heavy := []string{"heavy-0", "heavy-1", "heavy-2"}
	for _, k := range heavy {
		f.spend(k, 1000)
	}
	f.spend("light", 10) // active for 10 s
	f.spend("new", 1000)
	if n := f.held(); n != 4 {
		t.Fatalf("%d keys held, want max_keys 4", n)
	}
	if r := f.remaining("light"); r != 1000 {
		t.Fatalf("the key that spent least has %d tokens left, want 1,000: it must be the one evicted", r)
	}
	for _, k := range append(heavy, "new") {
		if r := f.remaining(k); r > 500 {
			t.Fatalf("%s, which spent 1,000 tokens, has %d left: evicted instead of the key that spent least", k, r)
		}
	}
}

// evictionSeries matches docs/limiterd.md's count of the keyed memory
// store's lossy evictions, limiterd_memory_evictions_total{store="keyed"}.
var evictionSeries = regexp.MustCompile(`(?m)^(limiterd_memory_evictions_total)\{[^}]*store="keyed"[^}]*\} (\S+)$`)

// TestPromiseMaxKeysLossyEvictionsCounted: with max_keys 4, dropping keys
// at rest counts no lossy eviction; then each of 6 new keys, with every
// key held active, evicts one that spent, and /metrics counts 6.
func TestPromiseMaxKeysLossyEvictionsCounted(t *testing.T) {
	const maxKeys = 4
	f := newKeyedFlood(t, maxKeys, 1)
	for i := range maxKeys {
		f.spend("resting-"+strconv.Itoa(i), 1)
	}
	waitFor(t, "the keys that spent 1 token back at rest", func() bool {
		for i := range maxKeys {
			if f.remaining("resting-"+strconv.Itoa(i)) != 1000 {
				return false
			}
		}
		return true
	})
	for i := range maxKeys {
		f.spend("active-"+strconv.Itoa(i), 1000)
	}
	evictions := func() float64 {
		t.Helper()
		m := f.p.metricsText()
		s := evictionSeries.FindStringSubmatch(m)
		if s == nil {
			t.Fatalf("no series counting the keyed memory store's lossy evictions in /metrics (docs/limiterd.md: keys held in memory, "+
				"\"the lossy eviction of one that spent least (counted)\"); limiterd_memory_* series:\n%s", grepLines(m, "limiterd_memory"))
		}
		v, err := strconv.ParseFloat(s[2], 64)
		if err != nil {
			t.Fatalf("%s: %v", s[0], err)
		}
		return v
	}
	if n := f.held(); n != maxKeys {
		t.Fatalf("%d keys held, want %d active", n, maxKeys)
	}
	if v := evictions(); v != 0 {
		t.Fatalf("%v lossy evictions counted after only keys at rest were dropped, want 0", v)
	}
	const flood = 6
	for i := range flood {
		f.spend("flood-"+strconv.Itoa(i), 1000)
	}
	if n := f.held(); n != maxKeys {
		t.Fatalf("%d keys held after the flood, want max_keys %d", n, maxKeys)
	}
	if v := evictions(); v != flood {
		t.Fatalf("%v lossy evictions counted, want %d: one per new key with every key held active", v, flood)
	}
}

// TestPromiseMaxKeysDefault: max_keys defaults to 1,048,576, with no file
// and with a file whose in_memory section leaves it out.
func TestPromiseMaxKeysDefault(t *testing.T) {
	const want = 1_048_576
	cfg, err := parseFlags([]string{"--http-addr", "127.0.0.1:0"}, io.Discard, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Backends.InMemory.MaxKeys; got != want {
		t.Errorf("no file: max_keys %d, want %d", got, want)
	}
	cfg, err = ParseConfig("limiterd.yaml", []byte("backends:\n  in_memory: {shards_count: 16, eviction_time: 60}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Backends.InMemory.MaxKeys; got != want {
		t.Errorf("in_memory without max_keys: max_keys %d, want %d", got, want)
	}
}
