package service

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	ratelimiterv1 "github.com/costwise/batcher/api/ratelimiter/v1"
	"github.com/costwise/batcher/internal/redistest"
)

// TestVersionFlag: --version prints the module version and the commit
// from the build information, and exits 0 without starting anything.
func TestVersionFlag(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("the test binary has no build information")
	}
	for _, arg := range []string{"--version", "-version"} {
		code, out := runOnce(t, arg, "--http-addr", "256.0.0.1:1")
		want := "limiterd " + bi.Main.Version + " commit "
		if code != 0 || !strings.HasPrefix(out, want) || strings.Count(out, "\n") != 1 {
			t.Fatalf("limiterd %s: %d %q, want 0 and one line starting %q", arg, code, out, want)
		}
	}
}

// TestVersionOf reads the commit and the modified flag from the VCS
// settings the go command records.
func TestVersionOf(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"},
	}}
	if got, want := versionOf(bi), "limiterd v1.2.3 commit abc123 modified go1.99"; got != want {
		t.Fatalf("versionOf = %q, want %q", got, want)
	}
	bi.Settings = bi.Settings[:1]
	if got, want := versionOf(bi), "limiterd v1.2.3 commit abc123 go1.99"; got != want {
		t.Fatalf("versionOf = %q, want %q", got, want)
	}
	bi.Settings = nil
	if got, want := versionOf(bi), "limiterd v1.2.3 commit unknown go1.99"; got != want {
		t.Fatalf("versionOf = %q, want %q", got, want)
	}
}

// TestRedisLogsAsJSON: with --log-format json, go-redis's own lines (a
// dial to a stopped Redis fails) come out as JSON lines too.
func TestRedisLogsAsJSON(t *testing.T) {
	srv := redistest.StartServer(t)
	p := start(t, fmt.Sprintf("store: redis\non_store_failure: fail_open\nbackends:\n  redis: {addr: %q}\n", srv.Addr()))
	srv.Kill()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(p.stderr.String(), "connection pool") {
		if time.Now().After(deadline) {
			t.Fatalf("no go-redis line within 20 s: %s", p.stderr.String())
		}
		p.post("/limit", "", "X-Client-Key", "k")
	}
	if code := p.stop(); code != 0 {
		t.Fatalf("exit status %d", code)
	}
	out := p.stderr.String()
	for i, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %d is not JSON: %q (%v)", i+1, line, err)
		}
		if strings.Contains(fmt.Sprint(rec["msg"]), "connection pool") && (rec["level"] != "WARN" || rec["component"] != "go-redis") {
			t.Fatalf("go-redis line %q: want level WARN, component go-redis", line)
		}
	}
}

// TestFailOpenMarked: with fail_open and Redis stopped, every API answers
// as allowed and marks the answer: X-Ratelimit-Fail-Open on POST /limit
// and /json, the x-ratelimit-fail-open trailer on ratelimiter.v1 Allow and
// Envoy's ShouldRateLimit, whose answer also asks Envoy to add the header
// to the client's response. With Redis up no answer is marked. On both
// gRPC servers.
func TestFailOpenMarked(t *testing.T) {
	for _, server := range []string{GRPCServerLean, GRPCServerGo} {
		t.Run(server, func(t *testing.T) {
			srv := redistest.StartServer(t)
			dir := t.TempDir()
			writeFile(t, dir, "gw.yaml", envoyRules)
			p := start(t, fmt.Sprintf("store: redis\non_store_failure: fail_open\nbackends:\n  redis: {addr: %q}\n", srv.Addr()),
				"--rules", dir, "--grpc-server", server)
			checkFailOpenMarks(t, p, false)
			srv.Kill()
			checkFailOpenMarks(t, p, true)
		})
	}
}

// checkFailOpenMarks calls every API once, expecting OK answers marked as
// failed open or not.
func checkFailOpenMarks(t *testing.T, p *proc, want bool) {
	t.Helper()
	mark := func(v string) bool { return v == "true" }
	r := p.post("/limit", "", "X-Client-Key", uuid.NewString())
	if r.StatusCode != http.StatusOK || mark(r.Header.Get(FailOpenHeader)) != want {
		t.Fatalf("POST /limit: %d %s=%q, want 200 marked=%v", r.StatusCode, FailOpenHeader, r.Header.Get(FailOpenHeader), want)
	}
	req := fmt.Sprintf(`{"domain":"gw","descriptors":[{"entries":[{"key":"remote_address","value":%q}]}]}`, uuid.NewString())
	r = p.post("/json", req)
	if r.StatusCode != http.StatusOK || mark(r.Header.Get(FailOpenHeader)) != want {
		t.Fatalf("POST /json: %d %s=%q, want 200 marked=%v", r.StatusCode, FailOpenHeader, r.Header.Get(FailOpenHeader), want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn := dial(t, p.grpc)
	var tr metadata.MD
	resp, err := ratelimiterv1.NewRateLimiterClient(conn).Allow(ctx, &ratelimiterv1.AllowRequest{Key: uuid.NewString()}, grpc.Trailer(&tr))
	if err != nil || !resp.Allowed || mark(strings.Join(tr.Get(FailOpenTrailer), ",")) != want {
		t.Fatalf("Allow: %v %v trailer %v, want allowed marked=%v", resp, err, tr, want)
	}
	tr = nil
	er, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, envoyReq("remote_address", uuid.NewString()), grpc.Trailer(&tr))
	if err != nil || er.OverallCode != rlsv3.RateLimitResponse_OK || mark(strings.Join(tr.Get(FailOpenTrailer), ",")) != want {
		t.Fatalf("ShouldRateLimit: %v %v trailer %v, want OK marked=%v", er, err, tr, want)
	}
	added := false
	for _, h := range er.ResponseHeadersToAdd {
		added = added || (h.Key == FailOpenTrailer && h.Value == "true")
	}
	if added != want {
		t.Fatalf("ShouldRateLimit: response_headers_to_add %v, want the mark=%v", er.ResponseHeadersToAdd, want)
	}
}
