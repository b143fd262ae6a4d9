package unarygrpc

import (
	"bytes"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	ratelimiterv1 "github.com/costwise/batcher/api/ratelimiter/v1"
)

// rawClient speaks HTTP/2 frame by frame to a Server.
type rawClient struct {
	t    *testing.T
	nc   net.Conn
	fr   *http2.Framer
	enc  *hpack.Encoder
	hbuf bytes.Buffer
	dec  *hpack.Decoder
}

func newRawClient(t *testing.T, addr string, settings ...http2.Setting) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	c := &rawClient{t: t, nc: nc, fr: http2.NewFramer(nc, nc), dec: hpack.NewDecoder(4096, nil)}
	c.enc = hpack.NewEncoder(&c.hbuf)
	if _, err := io.WriteString(nc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	// The server's SETTINGS, its connection WINDOW_UPDATE, the ACK of ours.
	var gotSettings, gotAck bool
	for !gotSettings || !gotAck {
		switch f := c.read().(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				gotAck = true
			} else {
				gotSettings = true
				if v, ok := f.Value(http2.SettingMaxConcurrentStreams); !ok || v == 0 {
					t.Fatalf("SETTINGS without MAX_CONCURRENT_STREAMS: %v", f)
				}
				_ = c.fr.WriteSettingsAck()
			}
		case *http2.WindowUpdateFrame:
		default:
			t.Fatalf("unexpected frame %v", f)
		}
	}
	return c
}

func (c *rawClient) read() http2.Frame {
	c.t.Helper()
	f, err := c.fr.ReadFrame()
	if err != nil {
		c.t.Fatalf("reading a frame: %v", err)
	}
	return f
}

// block encodes header fields, name and value pairs.
func (c *rawClient) block(fields ...string) []byte {
	c.hbuf.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		_ = c.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return append([]byte(nil), c.hbuf.Bytes()...)
}

var callHeaders = []string{":method", "POST", ":scheme", "http", ":path", "/ratelimiter.v1.RateLimiter/Allow", ":authority", "x", "content-type", "application/grpc", "te", "trailers"}

func (c *rawClient) headers(id uint32, endStream bool, fields ...string) {
	c.t.Helper()
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.block(fields...), EndHeaders: true, EndStream: endStream}); err != nil {
		c.t.Fatal(err)
	}
}

func grpcMessage(t *testing.T, flag byte, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	n := len(b)
	return append([]byte{flag, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}, b...)
}

// answer reads frames until stream id ends and returns its fields (headers
// and trailers, in order) and its data; RST_STREAM ends it with the code.
type answer struct {
	fields map[string]string
	data   []byte
	rst    *http2.ErrCode
}

func (c *rawClient) answer(id uint32) answer {
	c.t.Helper()
	a := answer{fields: map[string]string{}}
	c.dec.SetEmitFunc(func(f hpack.HeaderField) { a.fields[f.Name] = f.Value })
	for {
		f := c.read()
		if f.Header().StreamID != id {
			if _, ok := f.(*http2.GoAwayFrame); ok {
				c.t.Fatalf("GOAWAY while waiting for stream %d: %v", id, f)
			}
			continue
		}
		switch f := f.(type) {
		case *http2.HeadersFrame:
			if _, err := c.dec.Write(f.HeaderBlockFragment()); err != nil {
				c.t.Fatal(err)
			}
			if f.StreamEnded() {
				return a
			}
		case *http2.ContinuationFrame:
			if _, err := c.dec.Write(f.HeaderBlockFragment()); err != nil {
				c.t.Fatal(err)
			}
		case *http2.DataFrame:
			a.data = append(a.data, f.Data()...)
			if f.StreamEnded() {
				return a
			}
			if len(f.Data()) > 0 {
				_ = c.fr.WriteWindowUpdate(0, uint32(len(f.Data())))
				_ = c.fr.WriteWindowUpdate(id, uint32(len(f.Data())))
			}
		case *http2.RSTStreamFrame:
			code := f.ErrCode
			a.rst = &code
			return a
		}
	}
}

// goAway reads frames until GOAWAY and returns its code.
func (c *rawClient) goAway() http2.ErrCode {
	c.t.Helper()
	for {
		if g, ok := c.read().(*http2.GoAwayFrame); ok {
			return g.ErrCode
		}
	}
}

func rawServer(t *testing.T, s *Server) string {
	return serveTest(t, s, &limiter{})
}

func TestRawCall(t *testing.T) {
	c := newRawClient(t, rawServer(t, &Server{}))
	msg := grpcMessage(t, 0, &ratelimiterv1.AllowRequest{Key: "abcd"})

	// Headers split over HEADERS and two CONTINUATION frames, the message
	// over two DATA frames, END_STREAM on an empty third.
	block := c.block(callHeaders...)
	third := len(block) / 3
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:third]})
	_ = c.fr.WriteContinuation(1, false, block[third:2*third])
	_ = c.fr.WriteContinuation(1, true, block[2*third:])
	_ = c.fr.WriteData(1, false, msg[:3])
	_ = c.fr.WriteData(1, false, msg[3:])
	_ = c.fr.WriteData(1, true, nil)
	a := c.answer(1)
	if a.fields[":status"] != "200" || a.fields["content-type"] != "application/grpc" || a.fields["grpc-status"] != "0" {
		t.Fatalf("answer fields %v", a.fields)
	}
	var resp ratelimiterv1.AllowResponse
	if len(a.data) < 5 || proto.Unmarshal(a.data[5:], &resp) != nil || !resp.Allowed || resp.RetryAfter.AsDuration() != 4 {
		t.Fatalf("answer data %x", a.data)
	}

	// PING is answered with the same data.
	_ = c.fr.WritePing(false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8})
	for {
		if p, ok := c.read().(*http2.PingFrame); ok {
			if !p.IsAck() || p.Data != [8]byte{1, 2, 3, 4, 5, 6, 7, 8} {
				t.Fatalf("PING answer %v", p)
			}
			break
		}
	}
}

func TestRawRefusals(t *testing.T) {
	addr := rawServer(t, &Server{})
	c := newRawClient(t, addr)
	id := uint32(1)
	next := func() uint32 { id += 2; return id - 2 }
	call := func(fields []string, data ...[]byte) answer {
		s := next()
		c.headers(s, len(data) == 0, fields...)
		for i, d := range data {
			_ = c.fr.WriteData(s, i == len(data)-1, d)
		}
		return c.answer(s)
	}
	msg := grpcMessage(t, 0, &ratelimiterv1.AllowRequest{Key: "k"})
	with := func(name, value string) []string {
		out := append([]string(nil), callHeaders...)
		for i := 0; i < len(out); i += 2 {
			if out[i] == name {
				out[i+1] = value
				return out
			}
		}
		return append(out, name, value)
	}
	for _, tc := range []struct {
		name   string
		fields []string
		data   [][]byte
		status string
		rst    http2.ErrCode
	}{
		{"compressed flag without encoding", callHeaders, [][]byte{grpcMessage(t, 1, &ratelimiterv1.AllowRequest{Key: "k"})}, "13", 0},
		{"unknown payload flag", callHeaders, [][]byte{grpcMessage(t, 7, &ratelimiterv1.AllowRequest{Key: "k"})}, "13", 0},
		{"gzip encoding", with("grpc-encoding", "gzip"), [][]byte{msg}, "12", 0},
		{"not gRPC", with("content-type", "application/json"), [][]byte{msg}, "3", 0},
		{"bad timeout", with("grpc-timeout", "soon"), [][]byte{msg}, "13", 0},
		{"truncated message", callHeaders, [][]byte{msg[:len(msg)-1]}, "13", 0},
		{"no message", callHeaders, nil, "13", 0},
		{"unknown method", with(":path", "/ratelimiter.v1.RateLimiter/X"), [][]byte{msg}, "12", 0},
		{"malformed path", with(":path", "nonsense"), [][]byte{msg}, "12", 0},
		{"GET", with(":method", "GET"), nil, "13", 0},
		{"no path", callHeaders[2:], nil, "", http2.ErrCodeProtocol},
		{"upper-case name", with("X-Upper", "v"), [][]byte{msg}, "", http2.ErrCodeProtocol},
		{"connection header", with("connection", "close"), [][]byte{msg}, "", http2.ErrCodeProtocol},
		{"pseudo after regular", append(append([]string(nil), callHeaders...), ":foo", "x"), [][]byte{msg}, "", http2.ErrCodeProtocol},
	} {
		a := call(tc.fields, tc.data...)
		if tc.rst != 0 {
			if a.rst == nil || *a.rst != tc.rst {
				t.Errorf("%s: %v, want RST_STREAM %v", tc.name, a, tc.rst)
			}
			continue
		}
		if a.rst != nil || a.fields["grpc-status"] != tc.status || a.fields["grpc-message"] == "" {
			t.Errorf("%s: fields %v rst %v, want grpc-status %s with a message", tc.name, a.fields, a.rst, tc.status)
		}
	}
	// The connection still answers.
	if a := call(callHeaders, msg); a.fields["grpc-status"] != "0" {
		t.Fatalf("after the refusals: %v", a.fields)
	}
	// DATA after END_STREAM on a stream still open: STREAM_CLOSED. A
	// handler that blocks keeps it open.
	_ = next
}

func TestRawFlowControl(t *testing.T) {
	addr := rawServer(t, &Server{})
	// A client window of 3 bytes: the 9-byte answer comes in pieces, each
	// after a WINDOW_UPDATE (answer sends them).
	c := newRawClient(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 3}, http2.Setting{ID: http2.SettingMaxFrameSize, Val: 16384})
	c.headers(1, false, callHeaders...)
	_ = c.fr.WriteData(1, true, grpcMessage(t, 0, &ratelimiterv1.AllowRequest{Key: "abcd"}))
	a := c.answer(1)
	var resp ratelimiterv1.AllowResponse
	if a.fields["grpc-status"] != "0" || len(a.data) < 5 || proto.Unmarshal(a.data[5:], &resp) != nil || resp.RetryAfter.AsDuration() != 4 {
		t.Fatalf("answer through a 3-byte window: %v %x", a.fields, a.data)
	}

	// A request larger than the stream's window: the server opens it as
	// the bytes arrive.
	c.headers(3, false, callHeaders...)
	chunk := make([]byte, 16384)
	// One message of five frames, its prefix in the first.
	first := make([]byte, 16384)
	size := 5*16384 - 5
	first[1], first[2], first[3], first[4] = byte(size>>24), byte(size>>16), byte(size>>8), byte(size)
	_ = c.fr.WriteData(3, false, first)
	_ = c.fr.WriteData(3, false, chunk)
	for {
		if w, ok := c.read().(*http2.WindowUpdateFrame); ok && w.StreamID == 3 {
			if w.Increment != 2*16384 {
				t.Fatalf("stream WINDOW_UPDATE of %d, want %d", w.Increment, 2*16384)
			}
			break
		}
	}
	for range 3 {
		_ = c.fr.WriteData(3, false, chunk)
	}
	_ = c.fr.WriteData(3, true, nil)
	// Zeros: not a valid AllowRequest.
	if a := c.answer(3); a.fields["grpc-status"] != "13" {
		t.Fatalf("a request of 5 frames: %v", a)
	}

	// A frame larger than SETTINGS_MAX_FRAME_SIZE: GOAWAY FRAME_SIZE_ERROR.
	c2 := newRawClient(t, addr)
	c2.headers(1, false, callHeaders...)
	_ = c2.fr.WriteData(1, false, make([]byte, 16385))
	if code := c2.goAway(); code != http2.ErrCodeFrameSize {
		t.Fatalf("a frame too large: GOAWAY %v", code)
	}
}

func TestRawConnectionErrors(t *testing.T) {
	addr := rawServer(t, &Server{})
	for _, tc := range []struct {
		name string
		send func(c *rawClient)
		code http2.ErrCode
	}{
		{"even stream", func(c *rawClient) { c.headers(2, true, callHeaders...) }, http2.ErrCodeProtocol},
		{"stream id going back", func(c *rawClient) {
			c.headers(5, false, callHeaders...)
			c.headers(3, false, callHeaders...)
		}, http2.ErrCodeProtocol},
		{"DATA on an idle stream", func(c *rawClient) { _ = c.fr.WriteData(9, true, []byte{0}) }, http2.ErrCodeProtocol},
		{"bad HPACK", func(c *rawClient) {
			_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0xff, 0xff, 0xff, 0xff, 0xff}, EndHeaders: true})
		}, http2.ErrCodeCompression},
		{"CONTINUATION out of place", func(c *rawClient) { _ = c.fr.WriteContinuation(1, true, c.block(callHeaders...)) }, http2.ErrCodeProtocol},
		{"frame between HEADERS and CONTINUATION", func(c *rawClient) {
			_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block(callHeaders...)[:3]})
			_ = c.fr.WritePing(false, [8]byte{})
		}, http2.ErrCodeProtocol},
		{"window overflow", func(c *rawClient) {
			_ = c.fr.WriteWindowUpdate(0, 1<<31-1)
		}, http2.ErrCodeFlowControl},
		{"bad SETTINGS", func(c *rawClient) {
			_ = c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 31})
		}, http2.ErrCodeFlowControl},
		{"PUSH_PROMISE", func(c *rawClient) {
			_ = c.fr.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, BlockFragment: c.block(callHeaders...), EndHeaders: true})
		}, http2.ErrCodeProtocol},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newRawClient(t, addr)
			tc.send(c)
			if code := c.goAway(); code != tc.code {
				t.Fatalf("GOAWAY %v, want %v", code, tc.code)
			}
			// The server closes the connection after GOAWAY.
			for {
				if _, err := c.fr.ReadFrame(); err != nil {
					break
				}
			}
		})
	}
}

func TestRawRefusedStream(t *testing.T) {
	l := &limiter{release: make(chan struct{})}
	s := &Server{MaxConcurrentStreams: 1}
	addr := serveTest(t, s, l)
	c := newRawClient(t, addr)
	msg := grpcMessage(t, 0, &ratelimiterv1.AllowRequest{Key: "block"})
	c.headers(1, false, callHeaders...)
	_ = c.fr.WriteData(1, true, msg)
	for l.inFlight.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	c.headers(3, false, callHeaders...)
	if a := c.answer(3); a.rst == nil || *a.rst != http2.ErrCodeRefusedStream {
		t.Fatalf("a stream over MAX_CONCURRENT_STREAMS: %v", a)
	}
	// DATA after END_STREAM on a stream being answered.
	_ = c.fr.WriteData(1, false, msg)
	if a := c.answer(1); a.rst == nil || *a.rst != http2.ErrCodeStreamClosed {
		t.Fatalf("DATA on a half-closed stream: %v", a)
	}
	close(l.release)

	// A graceful stop sends GOAWAY naming the last stream.
	c2 := newRawClient(t, addr)
	c2.headers(1, false, callHeaders...)
	_ = c2.fr.WriteData(1, true, grpcMessage(t, 0, &ratelimiterv1.AllowRequest{Key: "k"}))
	if a := c2.answer(1); a.fields["grpc-status"] != "0" {
		t.Fatalf("call: %v", a.fields)
	}
	go s.GracefulStop()
	for {
		if g, ok := c2.read().(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeNo || g.LastStreamID != 1 {
				t.Fatalf("GOAWAY %v, want NO_ERROR after stream 1", g)
			}
			break
		}
	}
}

func TestRawTimeoutHeader(t *testing.T) {
	c := newRawClient(t, rawServer(t, &Server{}))
	c.headers(1, false, append(append([]string(nil), callHeaders...), "grpc-timeout", "3S")...)
	_ = c.fr.WriteData(1, true, grpcMessage(t, 0, &ratelimiterv1.AllowRequest{Key: "deadline"}))
	a := c.answer(1)
	var resp ratelimiterv1.AllowResponse
	if a.fields["grpc-status"] != "0" || proto.Unmarshal(a.data[5:], &resp) != nil {
		t.Fatalf("%v", a.fields)
	}
	if d := resp.RetryAfter.AsDuration(); d <= 2*time.Second || d > 3*time.Second {
		t.Fatalf("the handler's deadline is %v away, want about 3 s", d)
	}
	c.headers(3, false, append(append([]string(nil), callHeaders...), "grpc-timeout", "1n")...)
	_ = c.fr.WriteData(3, true, grpcMessage(t, 0, &ratelimiterv1.AllowRequest{Key: "block"}))
	if a := c.answer(3); a.fields["grpc-status"] != strconv.Itoa(4) {
		t.Fatalf("expired call: %v", a.fields)
	}
}

func TestRawResetCallsStillCount(t *testing.T) {
	l := &limiter{release: make(chan struct{})}
	addr := serveTest(t, &Server{MaxConcurrentStreams: 2}, l)
	c := newRawClient(t, addr)
	msg := grpcMessage(t, 0, &ratelimiterv1.AllowRequest{Key: "stubborn"})
	// Two calls started and reset at once: their methods still run.
	for _, id := range []uint32{1, 3} {
		c.headers(id, false, callHeaders...)
		_ = c.fr.WriteData(id, true, msg)
		_ = c.fr.WriteRSTStream(id, http2.ErrCodeCancel)
	}
	for l.inFlight.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	// Until they return, a third stream is refused.
	c.headers(5, false, callHeaders...)
	_ = c.fr.WriteData(5, true, grpcMessage(t, 0, &ratelimiterv1.AllowRequest{Key: "k"}))
	if a := c.answer(5); a.rst == nil || *a.rst != http2.ErrCodeRefusedStream {
		t.Fatalf("a stream while two reset calls run: %v", a)
	}
	if got := l.most.Load(); got > 2 {
		t.Fatalf("%d methods at once, limit 2", got)
	}
	close(l.release)
	for l.inFlight.Load() > 0 {
		time.Sleep(time.Millisecond)
	}
	c.headers(7, false, callHeaders...)
	_ = c.fr.WriteData(7, true, grpcMessage(t, 0, &ratelimiterv1.AllowRequest{Key: "k"}))
	if a := c.answer(7); a.fields["grpc-status"] != "0" {
		t.Fatalf("after the methods returned: %v", a)
	}
}

// TestRawSlotFreeWhenAnswerEnds: a call's slot is free by the time the
// frame that ends its answer reaches the peer, so that a client that opens
// its next stream on reading it, within MAX_CONCURRENT_STREAMS, is not
// refused, however late the worker that answered gets to return: for a
// unary call and for a streaming one.
func TestRawSlotFreeWhenAnswerEnds(t *testing.T) {
	streaming := grpc.ServiceDesc{ServiceName: "test.Streams", HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "Done", ClientStreams: true, ServerStreams: true,
			Handler: func(any, grpc.ServerStream) error { return nil }}}}
	for _, path := range []string{"/ratelimiter.v1.RateLimiter/Allow", "/test.Streams/Done"} {
		t.Run(path, func(t *testing.T) {
			held := make(chan struct{})
			var calls atomic.Int32
			testHookAnswered = func() {
				if calls.Add(1) == 1 {
					<-held // the first call's worker, after its answer is out
				}
			}
			t.Cleanup(func() { testHookAnswered = nil })
			defer close(held)
			s := &Server{MaxConcurrentStreams: 1}
			s.RegisterService(&streaming, struct{}{})
			c := newRawClient(t, rawServer(t, s))
			fields := append([]string(nil), callHeaders...)
			fields[5] = path
			for _, id := range []uint32{1, 3} {
				c.headers(id, false, fields...)
				_ = c.fr.WriteData(id, true, grpcMessage(t, 0, &ratelimiterv1.AllowRequest{Key: "k"}))
				if a := c.answer(id); a.rst != nil || a.fields["grpc-status"] != "0" {
					t.Fatalf("stream %d, opened after the answer to the one before ended: %v", id, a)
				}
			}
		})
	}
}
