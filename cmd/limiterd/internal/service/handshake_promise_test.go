package service

import (
	"io"
	"net"
	"testing"
	"time"
)

// TestPromiseGRPCHandshakeTimeoutDefault: with no setting, both gRPC
// servers close a connection that sends nothing 10 s after it was made:
// not before (the server's clock starts after the dial), and not long
// after.
func TestPromiseGRPCHandshakeTimeoutDefault(t *testing.T) {
	const timeout = 10 * time.Second
	for _, gs := range grpcServers {
		t.Run(gs, func(t *testing.T) {
			t.Parallel()
			p := start(t, "", "--grpc-server", gs)
			began := time.Now()
			c, err := net.Dial("tcp", p.grpc)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(timeout + 20*time.Second))
			_, err = io.Copy(io.Discard, c)
			took := time.Since(began)
			if err != nil {
				t.Fatalf("a silent connection was not closed within %v: %v", took, err)
			}
			if took < timeout-100*time.Millisecond {
				t.Fatalf("a silent connection was closed after %v, want %v", took, timeout)
			}
		})
	}
}
