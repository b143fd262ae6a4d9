package service

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/costwise/batcher/internal/redistest"
)

// compareRules exercise every rule feature both services share.
const compareRules = `
domain: cmp
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: tenant
    value: big
    rate_limit: {unit: day, requests_per_unit: 8}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: path
    value: /api/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 6}
  - key: file
    value: img*
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: quota
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: free
    rate_limit: {unlimited: true}
  - key: generic
    rate_limit: {unit: hour, requests_per_unit: 10, name: generic}
  - key: special
    rate_limit: {unit: hour, requests_per_unit: 3, replaces: [{name: generic}]}
  - key: org
    value: acme
    descriptors:
      - key: team
        rate_limit: {unit: hour, requests_per_unit: 3}
      - key: team
        value: core
        rate_limit: {unit: week, requests_per_unit: 2}
`

// TestSameAnswersAsEnvoyRatelimit sends the same requests to limiterd,
// configured by its own file, and to envoyproxy/ratelimit (envoyRatelimitBin),
// both on the shared Redis with the same rules, and compares every answer,
// with and without STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT.
func TestSameAnswersAsEnvoyRatelimit(t *testing.T) {
	bin := envoyRatelimitBin(t)
	redistest.Shared(t)
	for _, stop := range []bool{false, true} {
		t.Run(fmt.Sprintf("stop_increment_when_over_limit=%v", stop), func(t *testing.T) {
			theirs := startEnvoyRatelimit(t, bin, stop)
			dir := t.TempDir()
			writeFile(t, dir, "cmp.yaml", compareRules)
			ours := start(t, fmt.Sprintf("store: redis\nbackends:\n  redis: {addr: %q}\nenvoy: {key_prefix: %q, stop_increment_when_over_limit: %v}\n",
				redistest.Addr(), "ours-"+uuid.NewString()+"_", stop), "--rules", dir)
			compareAnswers(t, dial(t, ours.grpc), dial(t, theirs), 400)
		})
	}
}

// startEnvoyRatelimit runs envoyproxy/ratelimit on the shared Redis with
// compareRules and returns its gRPC address.
func startEnvoyRatelimit(t *testing.T, bin string, stop bool) string {
	t.Helper()
	return startEnvoyRatelimitWith(t, bin, map[string]string{
		"USE_STATSD": "false", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redistest.Addr(),
		"RUNTIME_ROOT": runtimeDir(t, map[string]string{"cmp.yaml": compareRules}), "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false",
		"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": fmt.Sprint(stop),
	}).grpc
}

// randomRequest draws a request of one to three descriptors over a few
// values, so that counters fill, go over and share.
func randomRequest(r *rand.Rand) *rlsv3.RateLimitRequest {
	menu := [][]string{
		{"user", "u1"}, {"user", "u2"}, {"tenant", "big"}, {"tenant", "small"},
		{"path", "/api/a"}, {"path", "/api/b"}, {"path", "/web"}, {"file", "img1"}, {"file", "img2"},
		{"shadow", "s"}, {"quota", "q"}, {"free", "f"}, {"generic", "g"}, {"special", "x"}, {"unknown", "v"},
		{"org", "acme", "team", "a"}, {"org", "acme", "team", "core"}, {"org", "other", "team", "a"},
	}
	req := &rlsv3.RateLimitRequest{Domain: "cmp", HitsAddend: uint32(r.IntN(4))}
	for range 1 + r.IntN(3) {
		kv := menu[r.IntN(len(menu))]
		d := &rlv3.RateLimitDescriptor{}
		for i := 0; i < len(kv); i += 2 {
			d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		if r.IntN(5) == 0 {
			d.HitsAddend = wrapperspb.UInt64(uint64(r.IntN(3)))
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// compareAnswers sends n random requests to both services, one after the
// other, and fails at the first answer that differs. Durations until reset
// may differ by the second that can pass between the two calls.
func compareAnswers(t *testing.T, ours, theirs *grpc.ClientConn, n int) {
	t.Helper()
	a, b := rlsv3.NewRateLimitServiceClient(ours), rlsv3.NewRateLimitServiceClient(theirs)
	r := rand.New(rand.NewPCG(1, 2))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	over := 0
	for i := range n {
		// Keep the pair inside one minute window (the tenant rule is per minute).
		if now := time.Now(); now.Second() == 59 && now.Nanosecond() > 500_000_000 {
			time.Sleep(time.Duration(1_000_000_000-now.Nanosecond()) + 50*time.Millisecond)
		}
		req := randomRequest(r)
		ra, err := a.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatalf("request %d to limiterd: %v", i, err)
		}
		rb, err := b.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatalf("request %d to envoyproxy/ratelimit: %v", i, err)
		}
		if diff := answerDiff(ra, rb); diff != "" {
			t.Fatalf("request %d %v: %s\nlimiterd:              %v\nenvoyproxy/ratelimit: %v", i, req, diff, ra, rb)
		}
		if rb.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
			over++
		}
	}
	if over == 0 || over == n {
		t.Fatalf("%d of %d requests over the limit: the sequence does not exercise both answers", over, n)
	}
	t.Logf("%d requests, %d over the limit, the same answers", n, over)
}

func answerDiff(a, b *rlsv3.RateLimitResponse) string {
	if a.OverallCode != b.OverallCode {
		return fmt.Sprintf("overall_code %v != %v", a.OverallCode, b.OverallCode)
	}
	if len(a.Statuses) != len(b.Statuses) {
		return "number of statuses"
	}
	for i := range a.Statuses {
		x, y := a.Statuses[i], b.Statuses[i]
		switch {
		case x.Code != y.Code:
			return fmt.Sprintf("status %d code", i)
		case x.LimitRemaining != y.LimitRemaining:
			return fmt.Sprintf("status %d limit_remaining", i)
		case x.CurrentLimit.GetRequestsPerUnit() != y.CurrentLimit.GetRequestsPerUnit() ||
			x.CurrentLimit.GetUnit() != y.CurrentLimit.GetUnit() || x.CurrentLimit.GetName() != y.CurrentLimit.GetName() ||
			(x.CurrentLimit == nil) != (y.CurrentLimit == nil):
			return fmt.Sprintf("status %d current_limit", i)
		case (x.DurationUntilReset == nil) != (y.DurationUntilReset == nil):
			return fmt.Sprintf("status %d duration_until_reset presence", i)
		}
		if d := x.DurationUntilReset.GetSeconds() - y.DurationUntilReset.GetSeconds(); d < -1 || d > 1 {
			return fmt.Sprintf("status %d duration_until_reset", i)
		}
	}
	return ""
}
