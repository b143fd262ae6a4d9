package limit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/costwise/batcher/limit"
)

// fixedClock is a clock standing still, so that the example's output does
// not depend on when it runs.
type fixedClock struct{ t time.Time }

func (c *fixedClock) Now() time.Time { return c.t }

func Example() {
	clock := &fixedClock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	store, err := limit.NewMemory(limit.MemoryOptions{Clock: clock})
	if err != nil {
		panic(err)
	}
	perUser := limit.TokenBucket(3, limit.PerSecond(1)).Named("per-user")
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		d, _ := limit.Allow(ctx, store, "alice", perUser)
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter)
	}
	clock.t = clock.t.Add(time.Second)
	d, _ := limit.Allow(ctx, store, "alice", perUser)
	fmt.Println(d.Allowed, d.Remaining)
	// Output:
	// true 2 0s 1s
	// true 1 0s 2s
	// true 0 0s 3s
	// false 0 1s 3s
	// true 0
}

// Several limits decided together: the request spends on the user's limit
// and on the tenant's, or on neither.
func ExampleCombine() {
	clock := &fixedClock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	store, _ := limit.NewMemory(limit.MemoryOptions{Clock: clock})
	user := limit.TokenBucket(2, limit.PerMinute(2)).Named("user")
	tenant := limit.FixedWindow(100, time.Hour).Named("tenant")
	reqs := []limit.Request{{Key: "alice", Policy: user, Cost: 1}, {Key: "acme", Policy: tenant, Cost: 1}}
	var out []limit.Decision
	for i := 0; i < 3; i++ {
		out, _ = store.AllowAll(context.Background(), reqs, out[:0])
		d := limit.Combine(out)
		fmt.Printf("allowed=%v policy=%s remaining=%d retry=%v\n", d.Allowed, d.Policy, d.Remaining, d.RetryAfter)
	}
	// Output:
	// allowed=true policy=user remaining=1 retry=0s
	// allowed=true policy=user remaining=0 retry=0s
	// allowed=false policy=user remaining=0 retry=30s
}

// Fractional costs: a policy scaled by 1000 counts thousandths of a token.
func ExamplePolicy_Scale() {
	clock := &fixedClock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	store, _ := limit.NewMemory(limit.MemoryOptions{Clock: clock})
	rate, _ := limit.RateFromFloat(0.1) // 0.1 token per second, as in a config file
	p, _ := limit.TokenBucket(10, rate).Scale(1000)
	d, _ := store.AllowN(context.Background(), "alice", p, 2500) // 2.5 tokens
	fmt.Println(d.Allowed, float64(d.Remaining)/1000, d.ResetAfter)
	// Output: true 7.5 25s
}

// A policy from text, as in a configuration file.
func ExampleParsePolicy() {
	p, err := limit.ParsePolicy("gcra rate=100/s burst=20 name=per-ip")
	fmt.Println(p.Name, p.Algorithm, p.Limit, p.Rate.Count, p.Rate.Period, err)
	_, err = limit.ParsePolicy("gcra rate=100/s burst=0")
	fmt.Println(err)
	// Output:
	// per-ip gcra 20 100 1s <nil>
	// limit: policy "": burst: must be positive
}

// A rate given as the interval between two emissions: a GCRA with a burst
// of 1 admits one request per 250 ms.
func ExampleEvery() {
	clock := &fixedClock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	store, _ := limit.NewMemory(limit.MemoryOptions{Clock: clock})
	p := limit.GCRA(limit.Every(250*time.Millisecond), 1)
	for _, at := range []time.Duration{0, 100 * time.Millisecond, 150 * time.Millisecond, 100 * time.Millisecond} {
		clock.t = clock.t.Add(at)
		d, _ := limit.Allow(context.Background(), store, "alice", p)
		fmt.Println(d.Allowed, d.RetryAfter)
	}
	// Output:
	// true 0s
	// false 150ms
	// true 0s
	// false 150ms
}

// Envoy's rate limit service counts every hit, over the limit or not: under
// a fixed window a client that keeps calling while denied stays denied, and
// a limit that one request exceeds does not keep the others from counting.
func ExampleStore_CountAll() {
	clock := &fixedClock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	store, _ := limit.NewMemory(limit.MemoryOptions{Clock: clock})
	perIP := limit.FixedWindow(2, time.Minute).Named("per-ip")
	perRoute := limit.FixedWindow(100, time.Minute).Named("per-route")
	reqs := []limit.Request{{Key: "10.0.0.1", Policy: perIP, Cost: 1}, {Key: "/search", Policy: perRoute, Cost: 1}}
	var out []limit.Decision
	for i := 0; i < 3; i++ {
		out, _ = store.CountAll(context.Background(), reqs, out[:0])
		fmt.Println(out[0].Allowed, out[0].Remaining, out[1].Allowed, out[1].Remaining)
	}
	// Output:
	// true 1 true 99
	// true 0 true 98
	// false 0 true 97
}
