package service

import (
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestPromiseGRPCKeepaliveDefault: with no setting, both gRPC servers let
// a client ping every 11 s on an idle connection, which keeps serving,
// and end with GOAWAY ENHANCE_YOUR_CALM "too_many_pings" one that pings
// every 5 s: docs/limiterd.md's "pings at most every 10 s". Without
// limiterd's policy either server would refuse pings closer than 5 min.
func TestPromiseGRPCKeepaliveDefault(t *testing.T) {
	for _, gs := range grpcServers {
		t.Run(gs, func(t *testing.T) {
			t.Parallel()
			p := start(t, "", "--grpc-server", gs)
			t.Run("every 11 s kept", func(t *testing.T) {
				t.Parallel()
				h := dialH2(t, p.grpc)
				_ = h.c.SetDeadline(time.Now().Add(2 * time.Minute))
				for i := range 4 {
					if i > 0 {
						time.Sleep(11 * time.Second)
					}
					if goAway := h.ping(byte(i)); goAway != nil {
						t.Fatalf("ping %d, 11 s after the one before: GOAWAY %v %q", i+1, goAway.ErrCode, goAway.DebugData())
					}
				}
				h.call(1)
				if got := h.outcome(1); got != "0" {
					t.Fatalf("a call after four pings 11 s apart: %s, want grpc-status 0", got)
				}
			})
			t.Run("every 5 s refused", func(t *testing.T) {
				t.Parallel()
				h := dialH2(t, p.grpc)
				_ = h.c.SetDeadline(time.Now().Add(2 * time.Minute))
				for i := range 4 {
					if i > 0 {
						time.Sleep(5 * time.Second)
					}
					if goAway := h.ping(byte(i)); goAway != nil {
						if goAway.ErrCode != http2.ErrCodeEnhanceYourCalm || string(goAway.DebugData()) != "too_many_pings" {
							t.Fatalf("ping %d: GOAWAY %v %q, want ENHANCE_YOUR_CALM too_many_pings", i+1, goAway.ErrCode, goAway.DebugData())
						}
						return
					}
				}
				// grpc-go acks the ping that ends the connection, then sends
				// the GOAWAY.
				_ = h.c.SetReadDeadline(time.Now().Add(10 * time.Second))
				for {
					f, err := h.fr.ReadFrame()
					if err != nil {
						t.Fatalf("four pings 5 s apart: no GOAWAY (%v)", err)
					}
					if g, ok := f.(*http2.GoAwayFrame); ok {
						if g.ErrCode != http2.ErrCodeEnhanceYourCalm || string(g.DebugData()) != "too_many_pings" {
							t.Fatalf("GOAWAY %v %q, want ENHANCE_YOUR_CALM too_many_pings", g.ErrCode, g.DebugData())
						}
						return
					}
				}
			})
		})
	}
}

// ping sends a PING and reads until its ack, returning nil, or until a
// GOAWAY, which it returns.
func (h *rawH2) ping(b byte) *http2.GoAwayFrame {
	h.t.Helper()
	data := [8]byte{b}
	if err := h.fr.WritePing(false, data); err != nil {
		h.t.Fatalf("writing a PING: %v", err)
	}
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			h.t.Fatalf("waiting for the PING's ack: %v", err)
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			return f
		case *http2.PingFrame:
			if f.IsAck() && f.Data == data {
				return nil
			}
		}
	}
}
