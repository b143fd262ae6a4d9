package service

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rawH2 is an HTTP/2 connection to limiterd's gRPC port, driven frame by
// frame.
type rawH2 struct {
	t        *testing.T
	c        net.Conn
	fr       *http2.Framer
	settings map[http2.SettingID]uint32 // the server's first SETTINGS
}

// dialH2 connects, sends the preface and empty SETTINGS, and reads the
// server's SETTINGS.
func dialH2(t *testing.T, addr string) *rawH2 {
	t.Helper()
	h := openH2(t, addr)
	fr := h.fr
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no SETTINGS from the server: %v", err)
		}
		if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
			_ = s.ForeachSetting(func(s http2.Setting) error { h.settings[s.ID] = s.Val; return nil })
			if err := fr.WriteSettingsAck(); err != nil {
				t.Fatal(err)
			}
			return h
		}
	}
}

// openH2 connects to addr, sends the preface and a SETTINGS frame of
// settings, and returns the connection before any frame is read.
func openH2(t *testing.T, addr string, settings ...http2.Setting) *rawH2 {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	h := &rawH2{t: t, c: c, fr: fr, settings: map[http2.SettingID]uint32{}}
	return h
}

// headers sends the HEADERS of a call to ratelimiter.v1's Allow on stream
// id, with extra fields, and no message.
func (h *rawH2) headers(id uint32, extra ...[2]string) {
	h.t.Helper()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	fields := append([][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", "/ratelimiter.v1.RateLimiter/Allow"},
		{":authority", "x"}, {"content-type", "application/grpc"}, {"te", "trailers"},
	}, extra...)
	for _, f := range fields {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	b := hb.Bytes()
	const frameMax = 16 << 10 // the initial SETTINGS_MAX_FRAME_SIZE
	first := b[:min(len(b), frameMax)]
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndHeaders: len(b) <= frameMax}); err != nil {
		h.t.Fatal(err)
	}
	for b = b[len(first):]; len(b) > 0; b = b[min(len(b), frameMax):] {
		if err := h.fr.WriteContinuation(id, len(b) <= frameMax, b[:min(len(b), frameMax)]); err != nil {
			h.t.Fatal(err)
		}
	}
}

// call sends a whole call on stream id, the key "k", with extra header
// fields.
func (h *rawH2) call(id uint32, extra ...[2]string) {
	h.t.Helper()
	h.headers(id, extra...)
	// AllowRequest{Key: "k"}: a 5-byte prefix and 3 bytes of message.
	if err := h.fr.WriteData(id, true, []byte{0, 0, 0, 0, 3, 10, 1, 'k'}); err != nil {
		h.t.Fatal(err)
	}
}

// outcome reads frames until stream id ends, and returns its grpc-status,
// or "RST_STREAM <code>" when the server reset it. A connection error
// fails the test.
func (h *rawH2) outcome(id uint32) string {
	h.t.Helper()
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			h.t.Fatalf("stream %d: reading: %v", id, err)
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			h.t.Fatalf("stream %d: GOAWAY %v %q", id, f.ErrCode, f.DebugData())
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return "RST_STREAM " + f.ErrCode.String()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				continue
			}
			for _, hf := range f.RegularFields() {
				if hf.Name == "grpc-status" {
					return hf.Value
				}
			}
		}
	}
}

// TestPromiseGRPCStreamsDefault: with no setting, both gRPC servers
// announce 1,000 streams per connection, serve 1,000 calls in flight on
// one connection and refuse the 1,001st with REFUSED_STREAM.
func TestPromiseGRPCStreamsDefault(t *testing.T) {
	const bound = 1000
	for _, gs := range grpcServers {
		t.Run(gs, func(t *testing.T) {
			p := start(t, "", "--grpc-server", gs)
			h := dialH2(t, p.grpc)
			if got, ok := h.settings[http2.SettingMaxConcurrentStreams]; !ok || got != bound {
				t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS %d (sent %v), want %d", got, ok, bound)
			}
			// 1,000 calls that send their headers and hold their message.
			for i := range bound {
				h.headers(uint32(2*i + 1))
			}
			over := uint32(2*bound + 1)
			h.call(over)
			if got := h.outcome(over); got != "RST_STREAM "+http2.ErrCodeRefusedStream.String() {
				t.Fatalf("call %d on one connection: %s, want RST_STREAM REFUSED_STREAM", bound+1, got)
			}
		})
	}
}

// TestPromiseLeanHeaderListBoundDefault: with no setting, the lean gRPC
// server announces a 16 KiB header list, serves a call whose header is
// under it and refuses, on the same connection, the stream of one whose
// header is past it; the connection serves the next call.
func TestPromiseLeanHeaderListBoundDefault(t *testing.T) {
	const bound = 16 << 10
	p := start(t, "", "--grpc-server", GRPCServerLean)
	h := dialH2(t, p.grpc)
	if got := h.settings[http2.SettingMaxHeaderListSize]; got != bound {
		t.Errorf("SETTINGS_MAX_HEADER_LIST_SIZE %d, want %d", got, bound)
	}
	h.call(1, [2]string{"x-junk", strings.Repeat("j", 15<<10)})
	if got := h.outcome(1); got != "0" {
		t.Fatalf("a call with a 15 KiB header: %s, want grpc-status 0", got)
	}
	// A value of 16 KiB less 100 bytes: the list (names, values and 32
	// bytes a field) is past 16 KiB, no single string is.
	h.call(3, [2]string{"x-junk", strings.Repeat("j", bound-100)})
	if got := h.outcome(3); got == "0" {
		t.Fatalf("a call with a header list past 16 KiB was served")
	}
	h.call(5)
	if got := h.outcome(5); got != "0" {
		t.Fatalf("the call after the refused one: %s, want grpc-status 0", got)
	}
}

// TestPromiseLeanHeaderFieldPastBound: on the lean gRPC server, a single
// header field longer than the 16 KiB bound cannot be skipped without
// decoding it (HPACK's state runs through every field of the block), so
// it ends the connection with GOAWAY COMPRESSION_ERROR, as
// docs/limiterd.md says, as Go's own HTTP/2 server does; the server goes
// on serving other connections.
func TestPromiseLeanHeaderFieldPastBound(t *testing.T) {
	p := start(t, "", "--grpc-server", GRPCServerLean)
	h := dialH2(t, p.grpc)
	h.call(1, [2]string{"x-junk", strings.Repeat("j", 17<<10)})
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			t.Fatalf("the connection ended without a GOAWAY: %v", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeCompression {
				t.Fatalf("GOAWAY %v, want COMPRESSION_ERROR", g.ErrCode)
			}
			break
		}
		if r, ok := f.(*http2.RSTStreamFrame); ok {
			t.Fatalf("RST_STREAM %v: the doc says the connection ends", r.ErrCode)
		}
	}
	if _, err := h.fr.ReadFrame(); err == nil {
		t.Fatal("a frame after the GOAWAY: the connection was not closed")
	}
	h2 := dialH2(t, p.grpc)
	h2.call(1)
	if got := h2.outcome(1); got != "0" {
		t.Fatalf("a call on a new connection: %s, want grpc-status 0", got)
	}
}
