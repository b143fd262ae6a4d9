package service

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	ratelimiterv1 "github.com/costwise/batcher/api/ratelimiter/v1"
)

// TestStreamFloodBounded opens, on one connection, ten times as many calls
// as grpc_max_concurrent_streams allows, each sending its headers and
// never its message: both gRPC servers refuse the streams past the limit,
// so the goroutines they hold stay within a few per allowed stream, and a
// legitimate caller on another connection is served during the flood.
func TestStreamFloodBounded(t *testing.T) {
	const limit, sent = 50, 500
	for _, gs := range grpcServers {
		t.Run(gs, func(t *testing.T) {
			p := start(t, "servers: {grpc_max_concurrent_streams: 50}\n", "--grpc-server", gs)
			legit := ratelimiterv1.NewRateLimiterClient(dial(t, p.grpc))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := legit.Allow(ctx, &ratelimiterv1.AllowRequest{Key: "warm"}); err != nil {
				t.Fatal(err)
			}
			base := runtime.NumGoroutine()
			c, err := net.Dial("tcp", p.grpc)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
				t.Fatal(err)
			}
			fr := http2.NewFramer(c, c)
			if err := fr.WriteSettings(); err != nil {
				t.Fatal(err)
			}
			// The server's frames are read and dropped, so that it is never
			// blocked writing to this connection; the ack of the PING sent
			// after the flood says the server has read all of it.
			acked := make(chan struct{})
			go func() {
				defer close(acked)
				for {
					f, err := fr.ReadFrame()
					if err != nil {
						return
					}
					if ping, ok := f.(*http2.PingFrame); ok && ping.IsAck() {
						return
					}
				}
			}()
			var hb bytes.Buffer
			enc := hpack.NewEncoder(&hb)
			for _, f := range [][2]string{
				{":method", "POST"}, {":scheme", "http"}, {":path", "/ratelimiter.v1.RateLimiter/Allow"},
				{":authority", "x"}, {"content-type", "application/grpc"}, {"te", "trailers"},
			} {
				_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			for i := range sent {
				if err := fr.WriteHeaders(http2.HeadersFrameParam{
					StreamID: uint32(2*i + 1), BlockFragment: hb.Bytes(), EndHeaders: true,
				}); err != nil {
					break // the server may end the connection: bounded either way
				}
			}
			_ = fr.WritePing(false, [8]byte{1})
			select {
			case <-acked:
			case <-ctx.Done():
				t.Fatal("no PING ack within 20 s")
			}
			if _, err := legit.Allow(ctx, &ratelimiterv1.AllowRequest{Key: "legit"}); err != nil {
				t.Fatalf("legitimate caller during the flood: %v", err)
			}
			if g := runtime.NumGoroutine() - base; g > 3*limit+50 {
				t.Fatalf("%d goroutines for %d stalled streams with a limit of %d", g, sent, limit)
			}
		})
	}
}
