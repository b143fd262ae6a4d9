package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestSnippetIsTheLibraryCode checks that the snippet the summary and the
// report show is the library code the replicas run: every line shown is a
// line of the sample's source (less its indentation, and less the body of
// an error-handling block), it makes each library call a replica makes, and
// it stays short.
func TestSnippetIsTheLibraryCode(t *testing.T) {
	snippet, err := librarySnippet()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("snippet:\n%s", snippet)
	var source strings.Builder
	for _, name := range snippetFiles {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		source.Write(b)
	}
	src := strings.ReplaceAll(source.String(), "\t", "    ")
	lines := strings.Split(snippet, "\n")
	if len(lines) < 8 || len(lines) > 16 {
		t.Errorf("the snippet has %d lines, want about ten", len(lines))
	}
	for _, l := range lines {
		if !strings.Contains(src, strings.TrimSuffix(strings.TrimSpace(l), " … }")) {
			t.Errorf("shown line %q is not in %v", l, snippetFiles)
		}
	}
	for _, call := range []string{"batcher.NewSharedResource(", ".Provision(ctx)", ".Start(ctx)", "batcher.New(",
		".WithRateLimiter(", "li.b.Start()", "batcher.NewWatcher(", "WithMaxBatchSize(", "EnqueueContext(", "batcher.NewOperation("} {
		if !strings.Contains(snippet, call) {
			t.Errorf("the snippet lacks %s", call)
		}
	}
}

// TestSnippetMarkers checks that regions are read as marked and that a
// marker out of place is an error rather than a silently wrong snippet.
func TestSnippetMarkers(t *testing.T) {
	src := "func f() {\n\t// shown in the report: begin\n\t// why\n\tx := g()\n\tif err := h(x); err != nil {\n\t\treturn err\n\t}\n\ty(x).\n\t\tz()\n\t// shown in the report: end\n}\n"
	got, err := markedLines(src)
	want := []string{"x := g()", "if err := h(x); err != nil { … }", "y(x).", "    z()"}
	if err != nil || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("markedLines = %q, %v; want %q", got, err, want)
	}
	for _, bad := range []string{
		"// shown in the report: begin\nx\n",
		"x\n// shown in the report: end\n",
		"// shown in the report: begin\n// shown in the report: begin\n// shown in the report: end\n",
	} {
		if _, err := markedLines(bad); err == nil {
			t.Errorf("markedLines(%q) accepted", bad)
		}
	}
}

// usersWith returns n user samples answered in lat, the first throttled of
// them having met a 429.
func usersWith(n int, lat time.Duration, throttled int) []userSample {
	s := make([]userSample, n)
	for i := range s {
		s[i] = userSample{Latency: lat, Status: 200}
		if i < throttled {
			s[i].Throttled = 1
		}
	}
	return s
}

// TestLatencyGoalFollowsTheMachine checks that the latency goal is twice the
// users' p99 measured alone in the same run, and never below twice the
// datastore's latency: a machine whose users get 30 ms alone meets a p99 of
// 45 ms with the library, which the former fixed goal (10 ms at the default
// datastore latency of 5 ms) reported as a failure.
func TestLatencyGoalFollowsTheMachine(t *testing.T) {
	cfg := defaultConfig()
	lib := &runResult{Library: true, Users: usersWith(1000, 45*time.Millisecond, 0)}
	for _, tc := range []struct {
		name string
		cal  calibration
		goal time.Duration
		met  bool
	}{
		{"loaded machine", calibration{Took: 3 * time.Second, Users: statsOf(usersWith(900, 30*time.Millisecond, 0))}, 60 * time.Millisecond, true},
		{"idle machine", calibration{Took: 3 * time.Second, Users: statsOf(usersWith(900, 6*time.Millisecond, 0))}, 12 * time.Millisecond, false},
		{"faster than the datastore", calibration{Users: statsOf(usersWith(900, time.Millisecond, 0))}, 10 * time.Millisecond, false},
		{"no calibration", calibration{}, 10 * time.Millisecond, false},
	} {
		if got := latencyGoal(cfg, tc.cal); got != tc.goal {
			t.Errorf("%s: goal %v, want %v", tc.name, got, tc.goal)
		}
		g := goals(cfg, []*runResult{lib}, tc.cal)[1]
		if g.What != "user latency p99" || g.Met != tc.met || !strings.Contains(g.Want, ms(tc.goal)) {
			t.Errorf("%s: goal %+v, want met=%v against %s", tc.name, g, tc.met, ms(tc.goal))
		}
	}
	g := goals(cfg, []*runResult{lib}, calibration{Took: 3 * time.Second, Users: statsOf(usersWith(900, 30*time.Millisecond, 0))})[1]
	if !strings.Contains(g.Want, "alone on this machine") || !strings.Contains(g.Want, "900 requests") {
		t.Errorf("the goal %q does not say how it was derived", g.Want)
	}
}

// TestHeadline checks that the headline states the users' outcome with and
// without the library in two short sentences.
func TestHeadline(t *testing.T) {
	lib := &runResult{Library: true, Users: usersWith(1000, 7*time.Millisecond, 0)}
	direct := &runResult{Users: usersWith(1000, 900*time.Millisecond, 600)}
	got := headline([]*runResult{lib, direct})
	want := "User requests throttled: 0 with the library, 600 without. User p99: 7.0 ms with, 900 ms without."
	if got != want {
		t.Errorf("headline = %q, want %q", got, want)
	}
	if n := len(strings.Fields(got)); n > 20 {
		t.Errorf("headline has %d words, want a short one", n)
	}
	if got := headline([]*runResult{lib}); !strings.Contains(got, "0 user requests were throttled") {
		t.Errorf("headline of one run = %q", got)
	}
}
