package unarygrpc

import (
	"strconv"
	"testing"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	ratelimiterv1 "github.com/costwise/batcher/api/ratelimiter/v1"
)

// withField returns callHeaders with name set to value (added when
// absent).
func withField(name, value string) []string {
	out := append([]string(nil), callHeaders...)
	for i := 0; i < len(out); i += 2 {
		if out[i] == name {
			out[i+1] = value
			return out
		}
	}
	return append(out, name, value)
}

// TestRequestsThatAreNotGRPC checks that a request that is not gRPC gets a
// well-formed HTTP answer, as from grpc-go: 415 without a gRPC
// content-type, 405 for a method other than POST; a body unless HEAD.
func TestRequestsThatAreNotGRPC(t *testing.T) {
	c := newRawClient(t, rawServer(t, &Server{}))
	base := []string{":scheme", "http", ":authority", "x"}
	for i, tc := range []struct {
		name   string
		fields []string
		status string
		body   bool
	}{
		{"GET /", append([]string{":method", "GET", ":path", "/"}, base...), "415", true},
		{"HEAD /", append([]string{":method", "HEAD", ":path", "/"}, base...), "415", false},
		{"POST JSON", withField("content-type", "application/json"), "415", true},
		{"GET with gRPC's content-type", withField(":method", "GET"), "405", true},
	} {
		id := uint32(2*i + 1)
		c.headers(id, true, tc.fields...)
		a := c.answer(id)
		if a.rst != nil || a.fields[":status"] != tc.status || a.fields["grpc-status"] == "" || (len(a.data) > 0) != tc.body {
			t.Errorf("%s: fields %v, body %q, RST_STREAM %v; want :status %s, grpc-status, body %v", tc.name, a.fields, a.data, a.rst, tc.status, tc.body)
		}
	}
}

// TestRefusedCallsAnsweredBeforeTheRequestEnds checks that a call refused
// at its headers (an unknown method: a client opening a stream it means to
// keep open) or at its message's length prefix is answered at once, not
// when the client ends its request.
func TestRefusedCallsAnsweredBeforeTheRequestEnds(t *testing.T) {
	c := newRawClient(t, rawServer(t, &Server{MaxRecvMsgSize: 1 << 10}))
	c.headers(1, false, withField(":path", "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")...)
	if a := c.answer(1); a.fields["grpc-status"] != "12" {
		t.Fatalf("an unknown method, request open: %v", a)
	}
	c.headers(3, false, callHeaders...)
	_ = c.fr.WriteData(3, false, []byte{0, 0, 0x10, 0, 0}) // a 1 MiB message follows
	if a := c.answer(3); a.fields["grpc-status"] != "8" {
		t.Fatalf("a message over the limit, request open: %v", a)
	}
	// The rest of the request is discarded, and the connection serves on.
	_ = c.fr.WriteData(3, true, make([]byte, 16<<10))
	c.headers(5, false, callHeaders...)
	_ = c.fr.WriteData(5, true, grpcMessage(t, 0, &ratelimiterv1.AllowRequest{Key: "k"}))
	if a := c.answer(5); a.fields["grpc-status"] != "0" || a.rst != nil {
		t.Fatalf("a call after the refusals: %v", a)
	}
}

// TestMalformedRequests checks RFC 9113's request rules that a server
// must enforce with a stream error PROTOCOL_ERROR.
func TestMalformedRequests(t *testing.T) {
	c := newRawClient(t, rawServer(t, &Server{}))
	msg := grpcMessage(t, 0, &ratelimiterv1.AllowRequest{Key: "k"})
	id := uint32(1)
	expectReset := func(name string) {
		t.Helper()
		if a := c.answer(id); a.rst == nil || *a.rst != http2.ErrCodeProtocol {
			t.Errorf("%s: %v, want RST_STREAM PROTOCOL_ERROR", name, a)
		}
		id += 2
	}
	c.headers(id, true, append([]string{":scheme", "https"}, callHeaders...)...)
	expectReset("two :scheme")
	c.headers(id, true, append([]string{":authority", "y"}, callHeaders...)...)
	expectReset("two :authority")
	c.headers(id, true, append(append([]string(nil), callHeaders[:2]...), callHeaders[4:]...)...)
	expectReset("no :scheme")

	c.headers(id, false, withField("content-length", "3")...)
	_ = c.fr.WriteData(id, true, msg)
	expectReset("content-length below the DATA sent")
	c.headers(id, false, withField("content-length", "100")...)
	_ = c.fr.WriteData(id, true, msg)
	expectReset("content-length above the DATA sent")

	c.headers(id, false, callHeaders...)
	_ = c.fr.WritePriority(id, http2.PriorityParam{StreamDep: id, Weight: 15})
	expectReset("PRIORITY depending on itself")

	// A content-length that matches is accepted.
	c.headers(id, false, withField("content-length", strconv.Itoa(len(msg)))...)
	_ = c.fr.WriteData(id, true, msg)
	if a := c.answer(id); a.fields["grpc-status"] != "0" {
		t.Fatalf("a matching content-length: %v", a)
	}
}

// TestStreamingMethods checks that server reflection (a bidirectional
// stream) and health's Check are served, so that grpcurl can list and
// call the services.
func TestStreamingMethods(t *testing.T) {
	s := &Server{}
	reflection.Register(s)
	healthpb.RegisterHealthServer(s, health.NewServer())
	cc := dial(t, serveTest(t, s, &limiter{}))
	ctx := ctxT(t)
	if r, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health check: %v %v", r, err)
	}
	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // several requests on one stream
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if n := len(r.GetListServicesResponse().GetService()); n != 5 {
			t.Fatalf("reflection lists %d services, want 5: %v", n, r)
		}
	}
	req := &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "ratelimiter.v1.RateLimiter"}}
	if err := stream.Send(req); err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || len(r.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Fatalf("file containing ratelimiter.v1.RateLimiter: %v %v", r, err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err == nil {
		t.Fatal("the stream goes on after CloseSend")
	}
}
