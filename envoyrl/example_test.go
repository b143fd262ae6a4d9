package envoyrl_test

import (
	"context"
	"fmt"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/costwise/batcher/envoyrl"
)

// A rule file in envoyproxy/ratelimit's format, a memory store, and three
// requests from one client address against a limit of 2 per minute.
func Example() {
	rules, err := envoyrl.Parse([]envoyrl.File{{Name: "gw.yaml", Content: []byte(`
domain: gw
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
`)}})
	if err != nil {
		fmt.Println(err)
		return
	}
	store, err := envoyrl.NewMemoryStore(envoyrl.MemoryOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	// A fixed clock, 15 s into a minute, so that the output is stable.
	now := func() time.Time { return time.Unix(1_800_000_015, 0) }
	svc := envoyrl.NewService(store, envoyrl.Options{Now: now})
	svc.SetRules(rules)

	req := &rlsv3.RateLimitRequest{Domain: "gw", Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}},
	}}}
	for range 3 {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		st := resp.Statuses[0]
		fmt.Println(resp.OverallCode, st.LimitRemaining, st.DurationUntilReset.AsDuration())
	}
	// Output:
	// OK 1 45s
	// OK 0 45s
	// OVER_LIMIT 0 45s
}
