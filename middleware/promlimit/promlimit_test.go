package promlimit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/costwise/batcher/middleware/limitcore"
	"github.com/costwise/batcher/middleware/promlimit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var names = limitcore.MetricsOptions{Namespace: "batcher", Subsystem: "http_limit"}

// A recorder counts into the collectors its names describe, one series per
// policy and result, and two recorders on one registry share them.
func TestRecorderCountsAndShares(t *testing.T) {
	reg := prometheus.NewRegistry()
	p := promlimit.New(reg)
	a, err := p.NewRecorder(names, []string{"per-ip", "global"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.NewRecorder(names, []string{"per-key"})
	if err != nil {
		t.Fatalf("a second middleware on the registry: %v", err)
	}
	a.Decision(0, limitcore.ResultAllowed)
	a.Decision(1, limitcore.ResultDenied)
	a.Decision(1, limitcore.ResultDenied)
	b.Decision(0, limitcore.ResultFailedOpen)
	a.StoreError()
	b.StoreError()
	a.Duration(3 * time.Millisecond)
	want := `
# HELP batcher_http_limit_store_errors_total Decisions the limit store failed to make (errors and timeouts).
# TYPE batcher_http_limit_store_errors_total counter
batcher_http_limit_store_errors_total 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "batcher_http_limit_store_errors_total"); err != nil {
		t.Error(err)
	}
	for _, c := range []struct {
		policy string
		result limitcore.Result
		want   float64
	}{
		{"per-ip", limitcore.ResultAllowed, 1}, {"global", limitcore.ResultDenied, 2},
		{"per-key", limitcore.ResultFailedOpen, 1}, {"per-ip", limitcore.ResultShadowDenied, 0},
	} {
		if got := decisions(t, reg, c.policy, c.result.String()); got != c.want {
			t.Errorf("decisions{policy=%s,result=%v} = %v, want %v", c.policy, c.result, got, c.want)
		}
	}
	// Every policy has a series for every result from the start, so that
	// rates of results not seen yet are 0, not absent.
	if n := testutil.CollectAndCount(reg, "batcher_http_limit_decisions_total"); n != 3*int(limitcore.NumResults) {
		t.Errorf("%d decision series, want %d", n, 3*limitcore.NumResults)
	}
	if n := testutil.CollectAndCount(reg, "batcher_http_limit_decision_duration_seconds"); n != 1 {
		t.Errorf("%d latency series, want 1", n)
	}
}

// decisions returns the value of decisions_total{policy,result} on reg.
func decisions(t *testing.T, reg *prometheus.Registry, policy, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "batcher_http_limit_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if got["policy"] == policy && got["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// Constant labels and buckets come from the names; the histogram's
// default buckets are limitcore's.
func TestNamesLabelsAndBuckets(t *testing.T) {
	reg := prometheus.NewRegistry()
	o := limitcore.MetricsOptions{Namespace: "svc", Subsystem: "grpc_limit",
		ConstLabels: prometheus.Labels{"zone": "a"}, Buckets: []float64{0.001, 0.01}}
	r, err := promlimit.New(reg).NewRecorder(o, []string{"p"})
	if err != nil {
		t.Fatal(err)
	}
	r.Duration(5 * time.Millisecond)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "svc_grpc_limit_") {
			t.Errorf("metric %s outside the names given", mf.GetName())
		}
		for _, m := range mf.GetMetric() {
			if !hasLabel(m.GetLabel(), "zone", "a") {
				t.Errorf("%s lacks zone=a: %v", mf.GetName(), m.GetLabel())
			}
			if h := m.GetHistogram(); h != nil {
				seen++
				if len(h.GetBucket()) != 2 || h.GetBucket()[1].GetCumulativeCount() != 1 {
					t.Errorf("histogram buckets %v, want the two given with the observation in the second", h.GetBucket())
				}
			}
		}
	}
	if seen != 1 {
		t.Errorf("%d histograms, want 1", seen)
	}
	if b := limitcore.DefaultBuckets(); len(b) != 16 || b[0] != 0.00005 || b[15] < 1.6 || b[15] > 1.7 {
		t.Errorf("default buckets %v, want 16 from 50 µs doubling to about 1.6 s", b)
	}
}

// A collector of the same name but another shape on the registry is an
// error, not a silent second set of metrics; so is a nil registerer.
func TestRegistrationErrors(t *testing.T) {
	reg := prometheus.NewRegistry()
	clash := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "batcher", Subsystem: "http_limit",
		Name: "store_errors_total", Help: "something else"})
	if err := reg.Register(clash); err != nil {
		t.Fatal(err)
	}
	if _, err := promlimit.New(reg).NewRecorder(names, []string{"p"}); err == nil || !strings.HasPrefix(err.Error(), "promlimit: ") {
		t.Errorf("clashing collector: err %v, want a promlimit error", err)
	}
	if _, err := promlimit.New(nil).NewRecorder(names, []string{"p"}); err == nil {
		t.Error("nil registerer: no error")
	}
}

func hasLabel(ls []*dto.LabelPair, name, value string) bool {
	for _, l := range ls {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}
