package service

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
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
	if _, err := envoy.ShouldRateLimit(ctx, envoyReq("remote_address", uuid.NewString())); err != nil {
		t.Fatal(err)
	}
	m := p.metricsText()
	if strings.Contains(m, mark) {
		t.Fatalf("a caller's domain is in /metrics:\n%s", grepLines(m, mark))
	}
	// 20 over gRPC and 20 over /json, none under a rule.
	other := `limiterd_decisions_total{api="envoy",domain="other",result="no_rule",rule=""}`
	if !strings.Contains(m, other+" 40") {
		t.Errorf("the unknown domains' decisions are not %s 40:\n%s", other, grepLines(m, "limiterd_decisions_total"))
	}
	if !strings.Contains(m, `limiterd_decisions_total{api="envoy",domain="gw",`) {
		t.Errorf("the rules' domain gw has no series of its own:\n%s", grepLines(m, "limiterd_decisions_total"))
	}
}
