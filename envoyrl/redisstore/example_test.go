package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"strconv"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/envoyrl"
	"github.com/costwise/batcher/envoyrl/redisstore"
	"github.com/costwise/batcher/internal/redistest"
)

// This example serves Envoy's rate limit API from counters in Redis, shared
// by every replica that uses the same server: a client address may make 2
// requests a minute, and the third is over the limit. With LocalAllowance,
// a counter decided often at a replica takes several units of its window in
// one call and spends them there, without over-admitting across replicas.
// It needs a Redis server, so it is compiled but not run by go test;
// TestExampleSteps runs the same steps and checks them.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	store := redisstore.New(client, redisstore.Options{LocalAllowance: true})
	defer store.Close()

	rules, err := envoyrl.Parse([]envoyrl.File{{Name: "gw.yaml", Content: []byte(`
domain: gw
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
`)}})
	if err != nil {
		log.Fatal(err)
	}
	svc := envoyrl.NewService(store, envoyrl.Options{})
	svc.SetRules(rules)

	req := &rlsv3.RateLimitRequest{Domain: "gw", Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}},
	}}}
	for range 3 {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(resp.OverallCode, resp.Statuses[0].LimitRemaining)
	}
}

// TestExampleSteps is ExampleNew against the tests' Redis, on counters of
// their own (a prefix of the run), away from a minute's edge so that the
// three requests share a window.
func TestExampleSteps(t *testing.T) {
	redistest.AwayFromWindowEdge(time.Minute, 5*time.Second)
	store := redisstore.New(redistest.Shared(t), redisstore.Options{LocalAllowance: true})
	t.Cleanup(func() { store.Close() })
	rules, err := envoyrl.Parse([]envoyrl.File{{Name: "gw.yaml", Content: []byte(
		"domain: gw\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")}})
	if err != nil {
		t.Fatal(err)
	}
	svc := envoyrl.NewService(store, envoyrl.Options{KeyPrefix: "example" + strconv.FormatInt(time.Now().UnixNano(), 36) + "_"})
	svc.SetRules(rules)
	entry := &rlv3.RateLimitDescriptor_Entry{Key: "remote_address", Value: "10.0.0.1"}
	req := &rlsv3.RateLimitRequest{Domain: "gw", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{entry}}}}
	want := []struct {
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
	}{{rlsv3.RateLimitResponse_OK, 1}, {rlsv3.RateLimitResponse_OK, 0}, {rlsv3.RateLimitResponse_OVER_LIMIT, 0}}
	for i, w := range want {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode != w.code || resp.Statuses[0].LimitRemaining != w.remaining {
			t.Fatalf("request %d: %v, %d remaining; want %v, %d", i+1, resp.OverallCode, resp.Statuses[0].LimitRemaining, w.code, w.remaining)
		}
	}
}
