package service

import (
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
)

// grpcGoKnownFailures are the h2spec cases (generic, http2 and hpack)
// that grpc-go's server, as limiterd configures it, fails or skips with
// h2spec v2.2.1: it answers a request that is not gRPC without a body, so
// the flow-control cases that wait for DATA are skipped, and it does not
// check several of RFC 9113's stream states and request rules. Each case
// not listed here must pass.
var grpcGoKnownFailures = []string{
	`generic/2 Sends a WINDOW_UPDATE frame on half-closed (remote) stream`,
	`generic/2 Sends a PRIORITY frame on half-closed (remote) stream`,
	`http2/3.5 Sends invalid connection preface`,
	`http2/5.1 idle: Sends a DATA frame`,
	`http2/5.1 idle: Sends a RST_STREAM frame`,
	`http2/5.1 idle: Sends a WINDOW_UPDATE frame`,
	`http2/5.1 half closed (remote): Sends a DATA frame`,
	`http2/5.1 half closed (remote): Sends a HEADERS frame`,
	`http2/5.1 closed: Sends a DATA frame after sending RST_STREAM frame`,
	`http2/5.1 closed: Sends a DATA frame`,
	`http2/5.1.2 Sends HEADERS frames that causes their advertised concurrent stream limit to be exceeded`,
	`http2/5.3.1 Sends HEADERS frame that depend on itself`,
	`http2/5.3.1 Sends PRIORITY frame that depend on itself`,
	`http2/6.1 Sends a DATA frame on the stream that is not in "open" or "half-closed (local)" state`,
	`http2/6.4 Sends a RST_STREAM frame on a idle stream`,
	`http2/6.5.2 SETTINGS_ENABLE_PUSH (0x2): Sends the value other than 0 or 1`,
	`http2/6.5.2 SETTINGS_MAX_FRAME_SIZE (0x5): Sends the value below the initial value`,
	`http2/6.5.2 SETTINGS_MAX_FRAME_SIZE (0x5): Sends the value above the maximum allowed frame size`,
	`http2/6.5.3 Sends multiple values of SETTINGS_INITIAL_WINDOW_SIZE`,
	`http2/6.9.1 Sends SETTINGS frame to set the initial window size to 1 and sends HEADERS frame`,
	`http2/6.9.1 Sends multiple WINDOW_UPDATE frames increasing the flow control window to above 2^31-1`,
	`http2/6.9.1 Sends multiple WINDOW_UPDATE frames increasing the flow control window to above 2^31-1 on a stream`,
	`http2/6.9.2 Changes SETTINGS_INITIAL_WINDOW_SIZE after sending HEADERS frame`,
	`http2/6.9.2 Sends a SETTINGS frame for window size to be negative`,
	`http2/8.1.2.2 Sends a HEADERS frame that contains the TE header field with any value other than "trailers"`,
	`http2/8.1.2.3 Sends a HEADERS frame with empty ":path" pseudo-header field`,
	`http2/8.1.2.3 Sends a HEADERS frame that omits ":method" pseudo-header field`,
	`http2/8.1.2.3 Sends a HEADERS frame that omits ":scheme" pseudo-header field`,
	`http2/8.1.2.3 Sends a HEADERS frame that omits ":path" pseudo-header field`,
	`http2/8.1.2.6 Sends a HEADERS frame with the "content-length" header field which does not equal the DATA frame payload length`,
	`http2/8.1.2.6 Sends a HEADERS frame with the "content-length" header field which does not equal the sum of the multiple DATA frames payload length`,
	`http2/8.2 Sends a PUSH_PROMISE frame`,
	// These pass or fail from run to run: grpc-go's answer races the
	// frame h2spec sends next, or its GOAWAY comes after h2spec's timeout
	// on a loaded machine.
	`http2/6.10 Sends a CONTINUATION frame preceded by a DATA frame`,
	`http2/5.1 closed: Sends a HEADERS frame`,
	`http2/5.1 closed: Sends a HEADERS frame after sending RST_STREAM frame`,
	// A frame other than CONTINUATION inside a header block: grpc-go's
	// framer refuses it, but under -race on a loaded machine its GOAWAY
	// can come after h2spec has given up waiting (seen in 1 of 3 runs).
	`http2/4.3 Sends a HEADERS frame to another stream while sending the header blocks`,
	`http2/4.3 Sends a PRIORITY frame while sending the header blocks`,
	`http2/6.2 Sends a HEADERS frame to another stream while sending a HEADERS frame`,
	`http2/6.2 Sends a HEADERS frame without the END_HEADERS flag, and a PRIORITY frame`,
	`http2/5.5 Sends an unknown extension frame in the middle of a header block`,
}

// h2specCases is the number of cases in h2spec v2.2.1's generic, http2
// and hpack groups: a run that reports fewer did not run them all.
const h2specCases = 145

// h2specPath returns the h2spec binary scripts/test installed
// (BATCHER_H2SPEC), or one on PATH; without one the test is skipped, or
// fails under CI=true.
func h2specPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("BATCHER_H2SPEC"); p != "" {
		return p
	}
	if p, err := exec.LookPath("h2spec"); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("h2spec not found: scripts/test installs it and sets BATCHER_H2SPEC")
	}
	t.Skip("h2spec not found: set BATCHER_H2SPEC (scripts/test installs it)")
	return ""
}

// h2specResults runs h2spec against addr and returns each case's result
// ("pass", "fail" or "skip"), keyed by "group/section description".
func h2specResults(t *testing.T, bin, addr string) map[string]string {
	t.Helper()
	host, port, _ := strings.Cut(addr, ":")
	report := filepath.Join(t.TempDir(), "h2spec.xml")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-h", host, "-p", port, "-o", "2", "-j", report, "generic", "http2", "hpack").CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("h2spec did not finish: %v", ctx.Err())
	}
	raw, rerr := os.ReadFile(report)
	if rerr != nil {
		t.Fatalf("h2spec wrote no report (%v): %v\n%s", err, rerr, out)
	}
	var doc struct {
		Cases []struct {
			Package string    `xml:"package,attr"`
			Name    string    `xml:"classname,attr"`
			Failure *struct{} `xml:"failure"`
			Error   *struct{} `xml:"error"`
			Skipped *struct{} `xml:"skipped"`
		} `xml:"testsuite>testcase"`
	}
	if err := xml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("h2spec's report: %v", err)
	}
	results := make(map[string]string, len(doc.Cases))
	for _, c := range doc.Cases {
		r := "pass"
		switch {
		case c.Failure != nil || c.Error != nil:
			r = "fail"
		case c.Skipped != nil:
			r = "skip"
		}
		results[c.Package+" "+c.Name] = r
	}
	if len(results) < h2specCases {
		t.Fatalf("h2spec reported %d cases, want %d:\n%s", len(results), h2specCases, out)
	}
	return results
}

// TestH2Spec runs h2spec against both gRPC servers as limiterd starts
// them: the lean server passes every case; grpc-go's passes every case but
// its known failures.
func TestH2Spec(t *testing.T) {
	bin := h2specPath(t)
	for _, server := range []string{GRPCServerLean, GRPCServerGo} {
		t.Run(server, func(t *testing.T) {
			p := start(t, "", "--grpc-server", server)
			results := h2specResults(t, bin, p.grpc)
			var failed []string
			for name, r := range results {
				if r != "pass" && (server == GRPCServerLean || !slices.Contains(grpcGoKnownFailures, name)) {
					failed = append(failed, fmt.Sprintf("%s: %s", r, name))
				}
			}
			slices.Sort(failed)
			if len(failed) > 0 {
				t.Errorf("%s server: %d h2spec cases not passed:\n%s", server, len(failed), strings.Join(failed, "\n"))
			}
		})
	}
}

// TestReflectionListsServices checks that server reflection, which grpcurl
// asks first, lists the services on both servers.
func TestReflectionListsServices(t *testing.T) {
	for _, server := range []string{GRPCServerLean, GRPCServerGo} {
		t.Run(server, func(t *testing.T) {
			p := start(t, "", "--grpc-server", server)
			cc, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
			if err != nil {
				t.Fatal(err)
			}
			req := &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}
			if err := stream.Send(req); err != nil {
				t.Fatal(err)
			}
			resp, err := stream.Recv()
			if err != nil {
				t.Fatalf("list services: %v", err)
			}
			var names []string
			for _, s := range resp.GetListServicesResponse().GetService() {
				names = append(names, s.GetName())
			}
			for _, want := range []string{"ratelimiter.v1.RateLimiter", "envoy.service.ratelimit.v3.RateLimitService", "grpc.health.v1.Health"} {
				if !slices.Contains(names, want) {
					t.Errorf("reflection lists %v, without %s", names, want)
				}
			}
			_ = stream.CloseSend()
		})
	}
}
