package service

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ratelimiterv1 "github.com/costwise/batcher/api/ratelimiter/v1"
)

// The limits table of docs/limiterd.md, checked from outside at its
// defaults: no file and no limit flag, so that a changed default, or a
// bound applied on one API and not another, shows.

// TestPromiseGRPCMessageBoundDefault: with no setting, a gRPC request
// message of exactly 4 MiB is read (it reaches the handler, which refuses
// its key as too long) and one byte more is ResourceExhausted, on both
// gRPC servers and for both gRPC APIs.
func TestPromiseGRPCMessageBoundDefault(t *testing.T) {
	const bound = 4 << 20
	// A message holding only field 1, a string of n bytes, takes 1 byte of
	// tag, 4 of length (n < 2^28) and n.
	const atBound = bound - 5
	for _, gs := range grpcServers {
		t.Run(gs, func(t *testing.T) {
			p := start(t, "", "--grpc-server", gs)
			cc := dial(t, p.grpc)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			allow := ratelimiterv1.NewRateLimiterClient(cc)
			envoy := rlsv3.NewRateLimitServiceClient(cc)
			send := grpc.MaxCallSendMsgSize(64 << 20)
			for _, c := range []struct {
				n    int
				want codes.Code
			}{{atBound, codes.InvalidArgument}, {atBound + 1, codes.ResourceExhausted}} {
				key := strings.Repeat("k", c.n)
				_, err := allow.Allow(ctx, &ratelimiterv1.AllowRequest{Key: key}, send)
				if status.Code(err) != c.want {
					t.Errorf("Allow, a message of %d bytes: %v, want %v", c.n+5, err, c.want)
				}
				// RateLimitRequest's field 1 is the domain.
				_, err = envoy.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: key}, send)
				if status.Code(err) != c.want {
					t.Errorf("ShouldRateLimit, a message of %d bytes: %v, want %v", c.n+5, err, c.want)
				}
			}
			// The connection still serves calls.
			if _, err := allow.Allow(ctx, &ratelimiterv1.AllowRequest{Key: "after"}); err != nil {
				t.Fatalf("a call after the large ones: %v", err)
			}
		})
	}
}

// TestPromiseLeanServerRefusesFromThePrefix: the lean gRPC server answers
// ResourceExhausted to a message announced past the default 4 MiB as soon
// as the 5-byte length prefix is read, without waiting for the message.
func TestPromiseLeanServerRefusesFromThePrefix(t *testing.T) {
	p := start(t, "", "--grpc-server", GRPCServerLean)
	h := dialH2(t, p.grpc)
	h.headers(1)
	prefix := make([]byte, 5)
	binary.BigEndian.PutUint32(prefix[1:], 4<<20+1)
	if err := h.fr.WriteData(1, false, prefix); err != nil {
		t.Fatal(err)
	}
	if got, want := h.outcome(1), fmt.Sprint(int(codes.ResourceExhausted)); got != want {
		t.Fatalf("a message announced at 4 MiB + 1, before its bytes: %s, want grpc-status %s", got, want)
	}
}

// TestPromiseEnvoyRequestBoundsDefault: at the default bounds (64
// descriptors, 32 entries a descriptor) a request is decided, one past
// them is refused: 400 on POST /json, InvalidArgument on gRPC. The key
// bound counts the domain, keys and values of a descriptor together: no
// part alone is long, the sum is past 1 KiB.
func TestPromiseEnvoyRequestBoundsDefault(t *testing.T) {
	for _, gs := range grpcServers {
		t.Run(gs, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "gw.yaml", envoyRules)
			p := start(t, "", "--rules", dir, "--grpc-server", gs)
			envoy := rlsv3.NewRateLimitServiceClient(dial(t, p.grpc))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			descriptors := func(n, entries, valueLen int) *rlsv3.RateLimitRequest {
				r := &rlsv3.RateLimitRequest{Domain: "gw"}
				for range n {
					d := &rlv3.RateLimitDescriptor{}
					for j := range entries {
						d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{
							Key: fmt.Sprint("k", j), Value: strings.Repeat("v", valueLen),
						})
					}
					r.Descriptors = append(r.Descriptors, d)
				}
				return r
			}
			cases := []struct {
				name string
				req  *rlsv3.RateLimitRequest
				ok   bool
			}{
				{"64 descriptors", descriptors(64, 1, 1), true},
				{"65 descriptors", descriptors(65, 1, 1), false},
				{"32 entries", descriptors(1, 32, 1), true},
				{"33 entries", descriptors(1, 33, 1), false},
				{"4 values of 200 bytes", descriptors(1, 4, 200), true},
				{"4 values of 300 bytes", descriptors(1, 4, 300), false},
			}
			for _, c := range cases {
				_, err := envoy.ShouldRateLimit(ctx, c.req)
				if c.ok && err != nil {
					t.Errorf("ShouldRateLimit, %s: %v, want an answer", c.name, err)
				}
				if !c.ok && status.Code(err) != codes.InvalidArgument {
					t.Errorf("ShouldRateLimit, %s: %v, want InvalidArgument", c.name, err)
				}
				body := jsonRequest(c.req)
				want := http.StatusOK
				if !c.ok {
					want = http.StatusBadRequest
				}
				if got := p.postDrain("/json", body); got != want {
					t.Errorf("POST /json, %s: %d, want %d", c.name, got, want)
				}
			}
		})
	}
}

// jsonRequest writes r as POST /json takes it.
func jsonRequest(r *rlsv3.RateLimitRequest) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"domain":%q,"descriptors":[`, r.Domain)
	for i, d := range r.Descriptors {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"entries":[`)
		for j, e := range d.Entries {
			if j > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"key":%q,"value":%q}`, e.Key, e.Value)
		}
		b.WriteString("]}")
	}
	b.WriteString("]}")
	return b.String()
}

// TestPromiseRESTBodyBoundDefault: with no setting, a REST body of 64 KiB
// is read and one of 64 KiB + 1 is refused with 413, whether its length is
// declared or it comes in chunks, and on POST /limit as on POST /json; the
// same at 4 MiB set by --max-body-bytes.
func TestPromiseRESTBodyBoundDefault(t *testing.T) {
	t.Run("default", func(t *testing.T) { testRESTBodyBound(t, 64<<10) })
	// Past the Envoy JSON endpoint's own default of 1 MiB: the flag holds
	// for POST /json too.
	t.Run("flag 4 MiB", func(t *testing.T) { testRESTBodyBound(t, 4<<20, "--max-body-bytes", "4194304") })
}

func testRESTBodyBound(t *testing.T, bound int, args ...string) {
	dir := t.TempDir()
	writeFile(t, dir, "gw.yaml", envoyRules)
	p := start(t, "", append([]string{"--rules", dir}, args...)...)
	// A valid request padded with spaces to n bytes.
	padded := func(n int) string {
		req := `{"domain":"gw","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`
		return req + strings.Repeat(" ", n-len(req))
	}
	post := func(path, body string, chunked bool) int {
		t.Helper()
		var r io.Reader = strings.NewReader(body)
		if chunked {
			// An io.Reader whose length net/http cannot know is sent chunked.
			r = io.MultiReader(r)
		}
		req, err := http.NewRequest(http.MethodPost, "http://"+p.http+path, r)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Client-Key", "body-bound")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	for _, chunked := range []bool{false, true} {
		if got := post("/json", padded(bound), chunked); got != http.StatusOK {
			t.Errorf("POST /json with a %d-byte body (chunked %v): %d, want 200", bound, chunked, got)
		}
		if got := post("/json", padded(bound+1), chunked); got != http.StatusRequestEntityTooLarge {
			t.Errorf("POST /json with a %d-byte body (chunked %v): %d, want 413", bound+1, chunked, got)
		}
	}
	// POST /limit ignores its body, and is refused one past the bound all
	// the same, chunked too (a chunked one used to pass, of any size).
	for _, chunked := range []bool{false, true} {
		if got := post("/limit", strings.Repeat("x", bound), chunked); got != http.StatusOK {
			t.Errorf("POST /limit with a %d-byte body (chunked %v): %d, want 200", bound, chunked, got)
		}
		if got := post("/limit", strings.Repeat("x", bound+1), chunked); got != http.StatusRequestEntityTooLarge {
			t.Errorf("POST /limit with a %d-byte body (chunked %v): %d, want 413", bound+1, chunked, got)
		}
	}
}

// TestPromiseLimitsFromFileAndFlags: a limit set in the file's limits
// section is applied, and the flag of the same name, when given, wins over
// it; the 400 says the bound in force.
func TestPromiseLimitsFromFileAndFlags(t *testing.T) {
	keyStatus := func(p *proc, n int) (int, string) {
		t.Helper()
		r := p.post("/limit", "", "X-Client-Key", strings.Repeat("k", n))
		return r.StatusCode, strings.TrimSpace(body(t, r))
	}
	const file = "limits: {max_key_bytes: 16, max_descriptors: 2}\n"
	p := start(t, file)
	if code, b := keyStatus(p, 16); code != http.StatusOK {
		t.Errorf("file max_key_bytes 16, a 16-byte key: %d %q, want 200", code, b)
	}
	if code, b := keyStatus(p, 17); code != http.StatusBadRequest || b != "X-Client-Key longer than 16 bytes" {
		t.Errorf("file max_key_bytes 16, a 17-byte key: %d %q, want 400 %q", code, b, "X-Client-Key longer than 16 bytes")
	}
	three := `{"domain":"gw","descriptors":[{"entries":[{"key":"a","value":"1"}]},{"entries":[{"key":"a","value":"2"}]},{"entries":[{"key":"a","value":"3"}]}]}`
	if got := p.postDrain("/json", three); got != http.StatusBadRequest {
		t.Errorf("file max_descriptors 2, 3 descriptors: %d, want 400", got)
	}

	p = start(t, file, "--max-key-bytes", "32", "--max-descriptors", "3")
	if code, b := keyStatus(p, 32); code != http.StatusOK {
		t.Errorf("flag --max-key-bytes 32 over the file's 16, a 32-byte key: %d %q, want 200", code, b)
	}
	if code, b := keyStatus(p, 33); code != http.StatusBadRequest || b != "X-Client-Key longer than 32 bytes" {
		t.Errorf("flag --max-key-bytes 32, a 33-byte key: %d %q, want 400 %q", code, b, "X-Client-Key longer than 32 bytes")
	}
	if got := p.postDrain("/json", three); got != http.StatusOK {
		t.Errorf("flag --max-descriptors 3 over the file's 2, 3 descriptors: %d, want 200", got)
	}

	// No file, no flag: the default's message, as the table quotes it.
	p = start(t, "")
	if code, b := keyStatus(p, 1025); code != http.StatusBadRequest || b != "X-Client-Key longer than 1024 bytes" {
		t.Errorf("default, a 1,025-byte key: %d %q, want 400 %q", code, b, "X-Client-Key longer than 1024 bytes")
	}
}

// TestPromiseRESTHeaderBoundDefault: with no setting, a REST request whose
// header passes 16 KiB is refused with 431 on every endpoint, including
// one past 16 KiB but within the 4 KiB that net/http lets in beyond its
// own bound; one of 15 KiB is served.
func TestPromiseRESTHeaderBoundDefault(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "gw.yaml", envoyRules)
	p := start(t, "", "--rules", dir)
	envoyReq := `{"domain":"gw","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`
	for _, c := range []struct{ path, body string }{{"/limit", ""}, {"/json", envoyReq}} {
		for _, kib := range []int{15, 17, 19} {
			r := p.post(c.path, c.body, "X-Client-Key", "header-bound", "X-Junk", strings.Repeat("j", kib<<10))
			_, _ = io.Copy(io.Discard, r.Body)
			want := http.StatusOK
			if kib > 16 {
				want = http.StatusRequestHeaderFieldsTooLarge
			}
			if r.StatusCode != want {
				t.Errorf("POST %s with a %d KiB header field: %d, want %d", c.path, kib, r.StatusCode, want)
			}
		}
	}
}

// TestPromiseRESTReadTimeoutsOnEveryPath: the read-header timeout bounds
// the header and the read timeout the whole request, body included, on
// POST /limit and POST /json with a declared length (served on the fast
// path, where the header's timeout used to cut the body) as with a chunked
// body (net/http). Here 300 ms and 3 s: a body sent over 900 ms is served.
func TestPromiseRESTReadTimeoutsOnEveryPath(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "gw.yaml", envoyRules)
	p := start(t, "", "--rules", dir, "--read-header-timeout", "300ms", "--read-timeout", "3s")
	jsonBody := `{"domain":"gw","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`
	for _, c := range []struct{ path, body, key string }{
		{"/limit", "0123456789", "slow-body"},
		{"/json", jsonBody, ""},
	} {
		for _, chunked := range []bool{false, true} {
			conn, err := net.Dial("tcp", p.http)
			if err != nil {
				t.Fatal(err)
			}
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			framing := fmt.Sprintf("Content-Length: %d", len(c.body))
			if chunked {
				framing = "Transfer-Encoding: chunked"
			}
			fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nX-Client-Key: %s\r\n%s\r\n\r\n", c.path, c.key, framing)
			parts := []string{c.body[:len(c.body)/3], c.body[len(c.body)/3 : 2*len(c.body)/3], c.body[2*len(c.body)/3:]}
			for _, part := range parts {
				time.Sleep(300 * time.Millisecond) // 900 ms in all: three header timeouts
				if chunked {
					part = fmt.Sprintf("%x\r\n%s\r\n", len(part), part)
				}
				if _, err := io.WriteString(conn, part); err != nil {
					t.Fatalf("%s (chunked %v): the connection was closed while the body came: %v", c.path, chunked, err)
				}
			}
			if chunked {
				_, _ = io.WriteString(conn, "0\r\n\r\n")
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("%s (chunked %v): no answer to a body within the read timeout: %v", c.path, chunked, err)
			}
			resp.Body.Close()
			conn.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s (chunked %v): status %d, want 200", c.path, chunked, resp.StatusCode)
			}
		}
	}
}
