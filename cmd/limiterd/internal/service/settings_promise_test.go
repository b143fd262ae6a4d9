package service

import (
	"bytes"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestPromiseLeanSettingsBound: limiterd's lean gRPC server takes 100
// SETTINGS frames at once (the handshake's included), then 10 a second,
// and ends a connection that sends more with GOAWAY ENHANCE_YOUR_CALM
// "too_many_settings". Every upper bound is taken from the time measured,
// so a slow run only loosens it.
func TestPromiseLeanSettingsBound(t *testing.T) {
	const burst, perSecond = 100, 10
	p := start(t, "", "--grpc-server", GRPCServerLean)

	t.Run("burst", func(t *testing.T) {
		began := time.Now()
		h := dialH2(t, p.grpc)
		if acks, g := h.settingsRound(burst - 1); g != nil {
			t.Fatalf("SETTINGS %d of a burst of %d: GOAWAY %v %q", acks+2, burst, g.ErrCode, g.DebugData())
		}
		over := perSecond*int(time.Since(began).Seconds()+1) + 20
		acks, g := h.settingsRound(over)
		refilled := perSecond*time.Since(began).Seconds() + 1
		if g == nil {
			t.Fatalf("%d SETTINGS past a burst of %d, %v after it began: all taken", over, burst, time.Since(began))
		}
		checkTooManySettings(t, g)
		if float64(acks) > refilled {
			t.Fatalf("%d SETTINGS taken past the burst, %v after it began; want at most %.0f", acks, time.Since(began), refilled)
		}
	})

	t.Run("rate", func(t *testing.T) {
		h := dialH2(t, p.grpc)
		if _, g := h.settingsRound(burst - 1); g != nil {
			t.Fatalf("a burst of %d: GOAWAY %v %q", burst, g.ErrCode, g.DebugData())
		}
		full := time.Now() // the bucket is empty from here
		time.Sleep(time.Second)
		over := perSecond*int(time.Since(full).Seconds()+1) + 20
		acks, g := h.settingsRound(over)
		waited := time.Since(full)
		if g == nil {
			t.Fatalf("%d SETTINGS %v after a full burst: all taken", over, waited)
		}
		checkTooManySettings(t, g)
		// At least a second's refill (less a token for rounding), at most
		// what the time measured refills.
		if acks < perSecond-1 || float64(acks) > perSecond*waited.Seconds()+1 {
			t.Fatalf("%d SETTINGS taken %v after a full burst; want %d to %.0f", acks, waited, perSecond-1, perSecond*waited.Seconds()+1)
		}
	})
}

func checkTooManySettings(t *testing.T, g *http2.GoAwayFrame) {
	t.Helper()
	if g.ErrCode != http2.ErrCodeEnhanceYourCalm || string(g.DebugData()) != "too_many_settings" {
		t.Fatalf("GOAWAY %v %q, want ENHANCE_YOUR_CALM too_many_settings", g.ErrCode, g.DebugData())
	}
}

// settingsRound sends n SETTINGS frames in one write and reads until all
// are acked, returning n and nil, or until a GOAWAY, returning the acks
// before it and the GOAWAY.
func (h *rawH2) settingsRound(n int) (int, *http2.GoAwayFrame) {
	h.t.Helper()
	var b bytes.Buffer
	fw := http2.NewFramer(&b, nil)
	for range n {
		_ = fw.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65535})
	}
	go func() { _, _ = h.c.Write(b.Bytes()) }()
	acks := 0
	for acks < n {
		f, err := h.fr.ReadFrame()
		if err != nil {
			h.t.Fatalf("after %d of %d SETTINGS acked: %v", acks, n, err)
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			return acks, f
		case *http2.SettingsFrame:
			if f.IsAck() {
				acks++
			}
		}
	}
	return acks, nil
}
