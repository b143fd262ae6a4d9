package service

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/costwise/batcher/internal/redistest"
)

const envoyRules = `
domain: gw
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: path
    value: /slow
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: api_key
    value: premium
    rate_limit: {unlimited: true}
`

func envoyReq(kv ...string) *rlsv3.RateLimitRequest {
	r := &rlsv3.RateLimitRequest{Domain: "gw"}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Descriptors = append(r.Descriptors, &rlv3.RateLimitDescriptor{
			Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: kv[i], Value: kv[i+1]}},
		})
	}
	return r
}

// stores are the configurations the Envoy API is tested on; each test key
// is fresh, so the shared Redis needs no cleaning between runs.
func envoyStores(t *testing.T) map[string]func(t *testing.T) string {
	return map[string]func(t *testing.T) string{
		"memory": func(*testing.T) string { return "" },
		"redis": func(t *testing.T) string {
			redistest.Shared(t)
			return fmt.Sprintf("store: redis\nbackends:\n  redis: {addr: %q}\nenvoy: {key_prefix: %q}\n", redistest.Addr(), "t-"+uuid.NewString()+"_")
		},
		"redis cluster": func(t *testing.T) string {
			addrs := redistest.StartCluster(t, 3)
			return fmt.Sprintf("store: redis\nbackends:\n  redis: {cluster_addrs: [%s]}\n", strings.Join(addrs, ", "))
		},
	}
}

func TestEnvoyAPIs(t *testing.T) {
	for name, cfg := range envoyStores(t) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "gw.yaml", envoyRules)
			p := start(t, cfg(t), "--rules", dir)
			testShouldRateLimit(t, p)
			testJSON(t, p)
		})
	}
}

func testShouldRateLimit(t *testing.T, p *proc) {
	c := rlsv3.NewRateLimitServiceClient(dial(t, p.grpc))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ip := uuid.NewString()
	redistest.AwayFromWindowEdge(time.Hour, 10*time.Second)
	for i := range 3 {
		resp, err := c.ShouldRateLimit(ctx, envoyReq("remote_address", ip, "api_key", "premium", "other", "x"))
		if err != nil {
			t.Fatal(err)
		}
		st := resp.Statuses
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || st[0].LimitRemaining != uint32(2-i) ||
			st[0].CurrentLimit.GetRequestsPerUnit() != 3 || st[0].DurationUntilReset.AsDuration() <= 0 ||
			st[1].LimitRemaining != 1<<32-1 || st[2].CurrentLimit != nil {
			t.Fatalf("call %d: %v", i, resp)
		}
	}
	resp, err := c.ShouldRateLimit(ctx, envoyReq("remote_address", ip))
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("fourth call: %v %v", resp, err)
	}
	if _, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "gw"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no descriptors: %v, want InvalidArgument", err)
	}
}

func testJSON(t *testing.T, p *proc) {
	redistest.AwayFromWindowEdge(time.Hour, 10*time.Second)
	slow := fmt.Sprintf(`{"domain":"gw","descriptors":[{"entries":[{"key":"path","value":"/slow"}]},{"entries":[{"key":"remote_address","value":%q}]}]}`, uuid.NewString())
	r := p.post("/json", slow)
	var out struct {
		OverallCode string
		Statuses    []struct {
			Code           string
			LimitRemaining int
		}
	}
	if err := json.NewDecoder(r.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if r.StatusCode != http.StatusOK || out.OverallCode != "OK" || len(out.Statuses) != 2 || out.Statuses[1].LimitRemaining != 2 {
		t.Fatalf("/json: %d %+v", r.StatusCode, out)
	}
	r = p.post("/json", slow)
	if r.StatusCode != http.StatusTooManyRequests || !strings.Contains(body(t, r), `"overallCode":"OVER_LIMIT"`) {
		t.Fatalf("/json over the limit: %d", r.StatusCode)
	}
	if r := p.post("/json", "{not json"); r.StatusCode != http.StatusBadRequest {
		t.Fatalf("/json with a bad body: %d", r.StatusCode)
	}
}

func TestRuleReload(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "gw.yaml", envoyRules)
	p := start(t, "", "--rules", dir, "--rules-interval", "50ms")
	c := rlsv3.NewRateLimitServiceClient(dial(t, p.grpc))
	ctx := context.Background()
	limitOf := func() uint32 {
		resp, err := c.ShouldRateLimit(ctx, envoyReq("remote_address", uuid.NewString()))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Statuses[0].CurrentLimit.GetRequestsPerUnit()
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10 s; log: %s", what, p.stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if got := limitOf(); got != 3 {
		t.Fatalf("limit %d, want 3", got)
	}
	writeFile(t, dir, "gw.yaml", strings.Replace(envoyRules, "requests_per_unit: 3", "requests_per_unit: 7", 1))
	waitFor("the new limit", func() bool { return limitOf() == 7 })
	writeFile(t, dir, "gw.yaml", "domain: gw\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 9, replaces: [{name: ''}]}\n")
	waitFor("the failed reload in the log", func() bool {
		return strings.Contains(p.stderr.String(), "rule reload failed") && strings.Contains(p.stderr.String(), file) &&
			strings.Contains(p.stderr.String(), "empty replaces entry")
	})
	if got := limitOf(); got != 7 {
		t.Fatalf("after a bad reload the limit is %d, want the last good 7", got)
	}
	_, m := p.get("http://" + p.metrics + "/metrics")
	if !strings.Contains(m, `limiterd_rule_reloads_total{result="failure"} 1`) || !strings.Contains(m, `limiterd_rule_reloads_total{result="success"} 2`) {
		t.Fatalf("reload metrics:\n%s", grepLines(m, "reloads"))
	}
}

// TestRuleReloadUnreadable: a rule directory that cannot be read, because
// a file is a dangling symlink or the directory is gone, is a failed
// reload in rule_reloads_total, counted once per failure, and the last
// good rules stay.
func TestRuleReloadUnreadable(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "rules")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "gw.yaml", envoyRules)
	p := start(t, "", "--rules", dir, "--rules-interval", "20ms")
	waitMetric := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, m := p.get("http://" + p.metrics + "/metrics")
			if strings.Contains(m, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s within 10 s:\n%s\nlog: %s", want, grepLines(m, "reloads"), p.stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := os.Symlink(filepath.Join(parent, "missing.yaml"), filepath.Join(dir, "broken.yaml")); err != nil {
		t.Fatal(err)
	}
	waitMetric(`limiterd_rule_reloads_total{result="failure"} 1`)
	// Gone at once (a removal file by file is seen half done by a poll:
	// see TestReadFailureIgnoresTheCall).
	if err := os.Rename(dir, filepath.Join(parent, "gone")); err != nil {
		t.Fatal(err)
	}
	waitMetric(`limiterd_rule_reloads_total{result="failure"} 2`)
	c := rlsv3.NewRateLimitServiceClient(dial(t, p.grpc))
	resp, err := c.ShouldRateLimit(context.Background(), envoyReq("remote_address", uuid.NewString()))
	if err != nil || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 3 {
		t.Fatalf("after the directory went: %v %v; want the last good limit 3", resp, err)
	}
	if n := strings.Count(p.stderr.String(), "rule reload failed"); n != 2 {
		t.Fatalf("%d failed reloads logged, want 2 (one per failure): %s", n, p.stderr.String())
	}
}
