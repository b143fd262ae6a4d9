package examples

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	ratelimiterv1 "github.com/costwise/batcher/api/ratelimiter/v1"
)

// dashboard is the part of a Grafana dashboard the check reads.
type dashboard struct {
	Title  string `json:"title"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

// grafanaVars are the dashboard's variables, replaced by values of their
// kind before an expression is parsed.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", "$job", ".+")

var labelValues = regexp.MustCompile(`^label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*), *([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// checkDashboard parses every PromQL expression of the dashboard and checks
// that each series it names is one that limiterd exports: it starts
// limiterd with the example configuration, calls each API once, and
// scrapes /metrics.
func checkDashboard(t *testing.T, file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	names := map[string][]string{} // metric name -> where it is used
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", file, p.Title)
		}
		for _, tg := range p.Targets {
			expr, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVars.Replace(tg.Expr))
			if err != nil {
				t.Errorf("%s: panel %q: %q: %v", file, p.Title, tg.Expr, err)
				continue
			}
			for _, n := range metricNames(expr) {
				names[n] = append(names[n], p.Title)
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("%s: variable %s: %q is not label_values(metric, label)", file, v.Name, v.Definition)
			continue
		}
		names[m[1]] = append(names[m[1]], "variable "+v.Name)
	}
	if len(names) == 0 {
		t.Fatalf("%s: no series named", file)
	}
	exported := scrapeLimiterd(t)
	for n, where := range names {
		if !exported[n] {
			t.Errorf("%s: %s (in %v) is not a series limiterd exports", file, n, where)
		}
	}
}

// metricNames lists the metric names an expression selects.
func metricNames(expr parser.Expr) []string {
	var out []string
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name != "" && !slices.Contains(out, name) {
			out = append(out, name)
		}
		return nil
	})
	return out
}

// scrapeLimiterd starts limiterd with examples/limiterd.yaml and the
// example rules, calls each of its APIs, and returns the names of the
// series on its /metrics. Its Redis (redis:6379) is not reachable here, so
// the calls fail open and the store error series appear too.
func scrapeLimiterd(t *testing.T) map[string]bool {
	t.Helper()
	l := startLimiterd(t, "limiterd.yaml", "rules")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	post := func(path, body string, headers ...string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+l.http+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		resp.Body.Close()
	}
	post("/limit", "", "X-Client-Key", "alice")
	post("/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]}`)
	conn, err := grpc.NewClient(l.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := ratelimiterv1.NewRateLimiterClient(conn).Allow(ctx, &ratelimiterv1.AllowRequest{Key: "alice"}); err != nil {
		t.Logf("ratelimiter.v1 Allow: %v", err)
	}
	_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain: "internal",
		Descriptors: []*rlv3.RateLimitDescriptor{{
			Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}},
		}},
	})
	if err != nil {
		t.Logf("ShouldRateLimit: %v", err)
	}
	code, body := get(t, "http://"+l.metrics+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	exported := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			exported[line[:i]] = true
		}
	}
	if !exported["limiterd_decisions_total"] {
		t.Fatalf("/metrics has no limiterd_decisions_total after a decision:\n%s", body)
	}
	return exported
}
