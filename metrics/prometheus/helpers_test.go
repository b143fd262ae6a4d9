package prometheus_test

import (
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// eventually polls cond every millisecond until it holds or 10 s pass; it is
// used only where the thing under test runs on its own goroutine.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// sample gathers reg and returns the value of the counter or gauge called
// name whose labels include the given name/value pairs; ok is false when
// there is none.
func sample(t *testing.T, reg prom.Gatherer, name string, labels ...string) (v float64, ok bool) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, labels) {
				return value(m), true
			}
		}
	}
	return 0, false
}

// mustSample is sample that fails the test when the metric is absent.
func mustSample(t *testing.T, reg prom.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	v, ok := sample(t, reg, name, labels...)
	if !ok {
		t.Fatalf("metric %s%v not gathered", name, labels)
	}
	return v
}

func hasLabels(m *dto.Metric, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == pairs[i] && l.GetValue() == pairs[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}
