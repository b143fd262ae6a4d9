package service

import (
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestPromiseLeanWriteTimeoutDefault: docs/limiterd.md's "gRPC write
// timeout (lean server) | 10 s | ... a call waiting that long for
// flow-control credit gets RST_STREAM CANCEL". With no setting, a client
// that opens its streams with a window of 0 and never grows it has its
// call reset with CANCEL 10 s after it sent it: not before, and not long
// after. The answer's headers come first (they take no credit).
func TestPromiseLeanWriteTimeoutDefault(t *testing.T) {
	t.Parallel()
	const timeout = 10 * time.Second
	p := start(t, "", "--grpc-server", GRPCServerLean)
	h := dialH2Settings(t, p.grpc, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	_ = h.c.SetDeadline(time.Now().Add(timeout + 20*time.Second))
	sent := time.Now()
	h.call(1)
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			t.Fatalf("a call held back by a window of 0: no RST_STREAM within %v: %v", time.Since(sent), err)
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v %q after %v, want the stream reset", f.ErrCode, f.DebugData(), time.Since(sent))
		case *http2.DataFrame:
			if len(f.Data()) > 0 {
				t.Fatalf("%d bytes of DATA sent into a window of 0", len(f.Data()))
			}
		case *http2.RSTStreamFrame:
			took := time.Since(sent)
			if f.StreamID != 1 || f.ErrCode != http2.ErrCodeCancel {
				t.Fatalf("RST_STREAM %v on stream %d, want CANCEL on stream 1", f.ErrCode, f.StreamID)
			}
			if took < timeout-100*time.Millisecond || took > timeout+5*time.Second {
				t.Fatalf("a call without credit was reset after %v, want %v", took, timeout)
			}
			t.Logf("reset with CANCEL after %v", took)
			return
		}
	}
}

// dialH2Settings is dialH2 sending settings in the client's SETTINGS, and
// acknowledging the server's ack of them.
func dialH2Settings(t *testing.T, addr string, settings ...http2.Setting) *rawH2 {
	t.Helper()
	h := openH2(t, addr, settings...)
	fr := h.fr
	for acked, got := false, false; !acked || !got; {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("the server's SETTINGS and ack: %v", err)
		}
		s, ok := f.(*http2.SettingsFrame)
		switch {
		case !ok:
		case s.IsAck():
			acked = true
		default:
			got = true
			_ = s.ForeachSetting(func(s http2.Setting) error { h.settings[s.ID] = s.Val; return nil })
			if err := fr.WriteSettingsAck(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return h
}
