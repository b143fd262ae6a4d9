package unarygrpc

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	ratelimiterv1 "github.com/costwise/batcher/api/ratelimiter/v1"
)

// trailing sets trailers on every call (twice, to check they add up),
// and fails the call whose key is "error".
type trailing struct {
	ratelimiterv1.UnimplementedRateLimiterServer
}

func (trailing) Allow(ctx context.Context, in *ratelimiterv1.AllowRequest) (*ratelimiterv1.AllowResponse, error) {
	if err := grpc.SetTrailer(ctx, metadata.Pairs("x-mark", "one", "x-raw-bin", "\x00\xff")); err != nil {
		return nil, status.Error(codes.Internal, "SetTrailer: "+err.Error())
	}
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-mark", "two", "grpc-status", "13"))
	if grpc.SetHeader(ctx, metadata.Pairs("x-h", "v")) == nil {
		return nil, status.Error(codes.Internal, "SetHeader accepted")
	}
	if in.Key == "error" {
		return nil, status.Error(codes.FailedPrecondition, "refused")
	}
	return &ratelimiterv1.AllowResponse{Allowed: true}, nil
}

// TestHandlerTrailers: trailers a unary handler sets reach a grpc-go
// client, on an answer and on an error, binary values intact; reserved
// names are not sent.
func TestHandlerTrailers(t *testing.T) {
	s := &Server{}
	ratelimiterv1.RegisterRateLimiterServer(s, trailing{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	c := ratelimiterv1.NewRateLimiterClient(dial(t, ln.Addr().String()))
	for _, key := range []string{"ok", "error"} {
		var tr metadata.MD
		_, err := c.Allow(ctxT(t), &ratelimiterv1.AllowRequest{Key: key}, grpc.Trailer(&tr))
		wantCode := codes.OK
		if key == "error" {
			wantCode = codes.FailedPrecondition
		}
		if status.Code(err) != wantCode {
			t.Fatalf("%s: %v, want %v", key, err, wantCode)
		}
		if got := tr.Get("x-mark"); len(got) != 2 || got[0] != "one" || got[1] != "two" {
			t.Fatalf("%s: x-mark %q, want [one two]", key, got)
		}
		if got := tr.Get("x-raw-bin"); len(got) != 1 || got[0] != "\x00\xff" {
			t.Fatalf("%s: x-raw-bin %q, want the two bytes back", key, got)
		}
		if got := tr.Get("grpc-status"); len(got) != 0 {
			t.Fatalf("%s: the handler's grpc-status was sent: %q", key, got)
		}
	}
}
