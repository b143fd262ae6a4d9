package service

import (
	"context"
	"fmt"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	ratelimiterv1 "github.com/costwise/batcher/api/ratelimiter/v1"
)

// The two clients of the README, kept here so that they compile and run.

// allowClient asks ratelimiter.v1 whether alice may spend 2 tokens.
func allowClient(addr string) (string, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := ratelimiterv1.NewRateLimiterClient(conn).Allow(ctx,
		&ratelimiterv1.AllowRequest{Key: "alice", Tokens: 2})
	if err != nil {
		return "", err // codes.Unavailable: the store is down and the policy is fail_closed
	}
	return fmt.Sprintf("allowed=%v retry after %v", resp.Allowed, resp.RetryAfter.AsDuration()), nil
}

// envoyClient asks the Envoy rate limit service about one request of domain
// "gw" from 10.0.0.1, as Envoy's ratelimit filter would.
func envoyClient(addr string) (string, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain: "gw",
		Descriptors: []*rlv3.RateLimitDescriptor{{
			Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}},
		}},
		HitsAddend: 1,
	})
	if err != nil {
		return "", err
	}
	st := resp.Statuses[0]
	return fmt.Sprintf("%v: %d of %d per %v left", resp.OverallCode, st.LimitRemaining,
		st.CurrentLimit.GetRequestsPerUnit(), st.CurrentLimit.GetUnit()), nil
}

func TestREADMEClients(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "gw.yaml", envoyRules)
	p := start(t, "", "--rules", dir)
	got, err := allowClient(p.grpc)
	if err != nil || got != "allowed=true retry after 0s" {
		t.Fatalf("allowClient: %q %v", got, err)
	}
	got, err = envoyClient(p.grpc)
	if err != nil || got != "OK: 2 of 3 per HOUR left" {
		t.Fatalf("envoyClient: %q %v", got, err)
	}
}
