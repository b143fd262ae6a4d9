package envoyrl

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestMemoryStoreMaxCounters: with MaxCounters, a flood of new keys fills
// the store to its bound and no further; the counters held keep counting;
// new keys are refused with ErrTooManyCounters until counters expire, and
// then taken again.
func TestMemoryStoreMaxCounters(t *testing.T) {
	clk := &clock{t: time.Unix(1_000_000, 0)}
	s, err := NewMemoryStore(MemoryOptions{Shards: 4, MaxCounters: 64, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	add := func(key string, ttl time.Duration) error {
		return s.Add(ctx, []Counter{{Key: key, Hits: 1, TTL: ttl}})
	}
	if err := add("victim", time.Hour); err != nil {
		t.Fatal(err)
	}
	refused := 0
	for i := range 10_000 {
		err := add(fmt.Sprint("flood-", i), time.Minute)
		switch {
		case errors.Is(err, ErrTooManyCounters):
			refused++
		case err != nil:
			t.Fatal(err)
		}
	}
	if n := s.Len(); n > 64 || refused < 10_000-64 {
		t.Fatalf("%d counters held, %d refused: want at most 64 held", n, refused)
	}
	c := []Counter{{Key: "victim", Hits: 1, TTL: time.Hour}}
	if err := s.Add(ctx, c); err != nil || c[0].Count != 2 {
		t.Fatalf("the victim's counter: %d, %v; want 2", c[0].Count, err)
	}
	clk.Set(1_000_000 + 120) // the flood's counters have expired
	if err := add("newcomer", time.Minute); err != nil {
		t.Fatalf("after the flood expired: %v", err)
	}
}

// TestMemoryStoreKeysAreCopies: a counter's key cut from a large string
// does not keep that string alive.
func TestMemoryStoreKeysAreCopies(t *testing.T) {
	s, err := NewMemoryStore(MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n, size = 200, 64 << 10
	before := heapInUse()
	for i := range n {
		big := fmt.Sprint(i, "-") + string(make([]byte, size))
		if err := s.Add(context.Background(), []Counter{{Key: big[:len(fmt.Sprint(i, "-"))], Hits: 1, TTL: time.Hour}}); err != nil {
			t.Fatal(err)
		}
	}
	if held := heapInUse() - before; held > n*size/8 {
		t.Fatalf("%d counters hold %d bytes: the store keeps the strings their keys were cut from", n, held)
	}
	runtime.KeepAlive(s)
}

func heapInUse() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestRequestBounds: MaxDescriptors, MaxDescriptorEntries and MaxKeyBytes
// refuse a request past them with ErrBadRequest; one at the bounds is
// decided.
func TestRequestBounds(t *testing.T) {
	s, _ := newTestService(t, Options{MaxDescriptors: 3, MaxDescriptorEntries: 2, MaxKeyBytes: 64})
	ctx := context.Background()
	many := func(n int) []*rlv3.RateLimitDescriptor {
		out := make([]*rlv3.RateLimitDescriptor, n)
		for i := range out {
			out[i] = desc("user", "u")
		}
		return out
	}
	good := []*rlsv3.RateLimitRequest{
		request(1, many(3)...),
		request(1, desc("user", "u", "tenant", "t")),
		request(1, desc("user", strings.Repeat("v", 64-len("svc")-len("user")-2))),
	}
	for i, r := range good {
		if _, err := s.ShouldRateLimit(ctx, r); err != nil {
			t.Errorf("request %d at the bounds: %v", i, err)
		}
	}
	bad := []*rlsv3.RateLimitRequest{
		request(1, many(4)...),
		request(1, desc("user", "u", "tenant", "t", "x", "y")),
		request(1, desc("user", strings.Repeat("v", 64-len("svc")-len("user")-1))),
	}
	for i, r := range bad {
		if _, err := s.ShouldRateLimit(ctx, r); !errors.Is(err, ErrBadRequest) {
			t.Errorf("request %d past the bounds: %v, want ErrBadRequest", i, err)
		}
	}
}

// aliasBomb is a rule file of nested aliases: each level is a mapping of
// ten rate_limit keys whose values are the level below, nine levels deep,
// so that a walk that follows aliases visits 10^9 nodes. It is 1.4 KB.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n  - key: k0\n    rate_limit: &a0 {unit: second, requests_per_unit: 1}\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "  - key: k%d\n    rate_limit: &a%d {", i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "rate_limit: *a%d", i-1)
		}
		b.WriteString("}\n")
	}
	return b.String()
}

// listBomb nests aliases where the decoder follows them too: each level
// is a list of ten descriptors whose descriptors are the level below.
func listBomb() string {
	var b strings.Builder
	b.WriteString("domain: d\nx: &a0 [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	b.WriteString("descriptors:\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "  - key: k%d\n    descriptors: &a%d [", i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "{key: k%d, descriptors: *a%d}", j, i-1)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// TestAliasBombRefusedFast: a rule file of nested aliases is refused in
// well under a second (it took 144 s), before any walk of ours expands it.
func TestAliasBombRefusedFast(t *testing.T) {
	for _, bomb := range []string{aliasBomb(), listBomb()} {
		start := time.Now()
		_, err := Parse([]File{{Name: "bomb.yaml", Content: []byte(bomb)}})
		took := time.Since(start)
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Fatalf("%d bytes of aliases: %v, want a *ConfigError", len(bomb), err)
		}
		if took > 2*time.Second {
			t.Fatalf("refused after %v, want well under a second", took)
		}
		t.Logf("%d bytes refused in %v: %v", len(bomb), took, err)
	}
}

// TestKeyWalkBounded: the key check stops at its own bound of nodes, aliases
// expanded, whatever the decoder let through.
func TestKeyWalkBounded(t *testing.T) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(aliasBomb()), &doc); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	w := keyWalk{budget: maxCheckedNodes}
	err := w.checkKeys(doc.Content[0])
	if err == nil || !strings.Contains(err.Error(), "nodes with aliases expanded") || time.Since(start) > 5*time.Second {
		t.Fatalf("walk: %v after %v; want the node bound", err, time.Since(start))
	}
}
