package service

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/uuid"
)

// TestPromiseUnknownDomainsLabelledOther: a domain the rules do not name,
// sent by a caller on gRPC or on POST /json, never becomes a label value
// or a metric name: its decisions count under domain="other", at the
// default max_metric_series, while the rules' own domain keeps its name.
func TestPromiseUnknownDomainsLabelledOther(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "gw.yaml", envoyRules)
	p := start(t, "", "--rules", dir)
	envoy := rlsv3.NewRateLimitServiceClient(dial(t, p.grpc))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const mark = "callerdomain"
	for i := range 20 {
		d := fmt.Sprintf("%s%d-%s", mark, i, uuid.NewString())
		req := envoyReq("remote_address", uuid.NewString())
		req.Domain = d
		if _, err := envoy.ShouldRateLimit(ctx, req); err != nil {
			t.Fatalf("ShouldRateLimit, domain %s: %v", d, err)
		}
		body := fmt.Sprintf(`{"domain":%q,"descriptors":[{"entries":[{"key":"remote_address","value":%q}]}]}`, d+"-json", uuid.NewString())
		if code := p.postDrain("/json", body); code != http.StatusOK {
			t.Fatalf("POST /json, domain %s: %d", d, code)
		}
	}
	// A descriptor with its own limit (Envoy's override) on an unknown
	// domain is not limited either, as in envoyproxy/ratelimit: twice over
	// a limit of 1 a minute, on gRPC and on /json, is OK both times.
	for i := range 5 {
		d := fmt.Sprintf("%s-override%d-%s", mark, i, uuid.NewString())
		req := envoyReq("k", "v")
		req.Domain = d
		req.Descriptors[0].Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_MINUTE}
		body := fmt.Sprintf(`{"domain":%q,"descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requestsPerUnit":1,"unit":"MINUTE"}}]}`, d+"-json")
		for range 2 {
			resp, err := envoy.ShouldRateLimit(ctx, req)
			if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Fatalf("override on unknown domain %s over gRPC: %v, %v; want OK", d, resp.GetOverallCode(), err)
			}
			if code := p.postDrain("/json", body); code != http.StatusOK {
				t.Fatalf("override on unknown domain %s over /json: %d, want 200", d, code)
			}
		}
	}
	if _, err := envoy.ShouldRateLimit(ctx, envoyReq("remote_address", uuid.NewString())); err != nil {
		t.Fatal(err)
	}
	m := p.metricsText()
	if strings.Contains(m, mark) {
		t.Fatalf("a caller's domain is in /metrics:\n%s", grepLines(m, mark))
	}
	// 20 over gRPC and 20 over /json, and the 20 overrides, none under a rule.
	other := `limiterd_decisions_total{api="envoy",domain="other",result="no_rule",rule=""}`
	if !strings.Contains(m, other+" 60") {
		t.Errorf("the unknown domains' decisions are not %s 60:\n%s", other, grepLines(m, "limiterd_decisions_total"))
	}
	if !strings.Contains(m, `limiterd_decisions_total{api="envoy",domain="gw",`) {
		t.Errorf("the rules' domain gw has no series of its own:\n%s", grepLines(m, "limiterd_decisions_total"))
	}
}
