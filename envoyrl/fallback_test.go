package envoyrl

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// flakyStore fails while down is set, and counts on a memory store
// otherwise.
type flakyStore struct {
	Store
	down  atomic.Bool
	calls atomic.Int64
}

var errDown = errors.New("store down")

func (f *flakyStore) Add(ctx context.Context, cs []Counter) error {
	f.calls.Add(1)
	if f.down.Load() {
		return errDown
	}
	return f.Store.Add(ctx, cs)
}

func (f *flakyStore) Get(ctx context.Context, cs []Counter) error {
	f.calls.Add(1)
	if f.down.Load() {
		return errDown
	}
	return f.Store.Get(ctx, cs)
}

// TestFallbackDividesLimit checks that while the primary fails the local
// store admits the limit divided by the replicas (user: 3 a minute over 3
// replicas, 1 each), that each failure is reported and the primary left
// alone for Probe, and that the primary counts again afterwards.
func TestFallbackDividesLimit(t *testing.T) {
	clk := &clock{t: time.Unix(1_000_040, 0)}
	mem := func() Store {
		s, err := NewMemoryStore(MemoryOptions{Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	primary := &flakyStore{Store: mem()}
	var failures atomic.Int64
	fs, err := WithFallback(primary, mem(), FallbackOptions{Replicas: 3, Probe: 5 * time.Second, Now: clk.Now,
		OnFailure: func(error) { failures.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	s := NewService(fs, Options{Now: clk.Now})
	s.SetRules(mustRules(t, serviceRules))
	alice := desc("user", "alice")

	expect(t, s, request(1, alice), ok, short{ok, 2, 40}) // primary: 1 of 3
	primary.down.Store(true)
	// Local: each hit counts 3 times, so 1 of 3 is this replica's share.
	expect(t, s, request(1, alice), ok, short{ok, 0, 40})
	expect(t, s, request(1, alice), over, short{over, 0, 40})
	if got := failures.Load(); got != 1 {
		t.Errorf("%d failures reported, want 1 (then the probe interval)", got)
	}
	if got := primary.calls.Load(); got != 2 {
		t.Errorf("primary called %d times, want 2", got)
	}
	if !fs.Down() {
		t.Error("not down after a failure")
	}

	clk.Set(1_000_046) // past the probe; the primary answers again
	primary.down.Store(false)
	expect(t, s, request(1, alice), ok, short{ok, 1, 34}) // primary: 2 of 3
	if fs.Down() {
		t.Error("down after the primary answered")
	}
}

func TestFallbackOptions(t *testing.T) {
	s, err := NewMemoryStore(MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, o := range []FallbackOptions{{Replicas: -1}, {Probe: -time.Second}} {
		if _, err := WithFallback(s, s, o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	if _, err := WithFallback(nil, s, FallbackOptions{}); err == nil {
		t.Error("nil primary accepted")
	}
}

// TestFallbackWithoutLocal checks that, without a local store, the calls
// made while the primary is down fail at once with its last failure.
func TestFallbackWithoutLocal(t *testing.T) {
	clk := &clock{t: time.Unix(1_000_040, 0)}
	mem, err := NewMemoryStore(MemoryOptions{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	primary := &flakyStore{Store: mem, down: atomic.Bool{}}
	primary.down.Store(true)
	fs, err := WithFallback(primary, nil, FallbackOptions{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	cs := []Counter{{Key: "k", Hits: 1, TTL: time.Minute}}
	for i := range 3 {
		if err := fs.Add(context.Background(), cs); !errors.Is(err, errDown) {
			t.Fatalf("call %d: %v, want the primary's failure", i, err)
		}
	}
	if got := primary.calls.Load(); got != 1 {
		t.Errorf("primary called %d times while down, want 1", got)
	}
	clk.Set(1_000_042)
	primary.down.Store(false)
	if err := fs.Add(context.Background(), cs); err != nil || cs[0].Count != 1 {
		t.Fatalf("after the probe: %v, count %d", err, cs[0].Count)
	}
}
