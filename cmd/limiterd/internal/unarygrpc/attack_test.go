package unarygrpc

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"

	ratelimiterv1 "github.com/costwise/batcher/api/ratelimiter/v1"
)

// The attacks below run against a real Server over loopback, each bounded
// in frames and in time, and check that the server's goroutines and
// memory stay bounded and that a legitimate caller on another connection
// is answered meanwhile.

// legitimateCall makes one call from grpc-go's client on a connection of
// its own.
func legitimateCall(t *testing.T, cc grpc.ClientConnInterface) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := ratelimiterv1.NewRateLimiterClient(cc).Allow(ctx, &ratelimiterv1.AllowRequest{Key: "legit"})
	if err != nil || !r.Allowed {
		t.Fatalf("a legitimate call during the attack: %v %v", r, err)
	}
}

// waitGoroutines waits, up to 20 s, for the goroutines to fall to at most
// n, and fails with the count otherwise.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines 20 s after the attack, want at most %d", runtime.NumGoroutine(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// heapInUse returns the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// countingListener counts the writes to the connections it accepts.
type countingListener struct {
	net.Listener
	writes atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: nc, l: l}, nil
}

type countingConn struct {
	net.Conn
	l *countingListener
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.l.writes.Add(1)
	return c.Conn.Write(p)
}

// goAwayWithDebug reads until GOAWAY and returns its code and debug data,
// counting the frames of type ack before it.
func (c *rawClient) goAwayCounting(ack func(http2.Frame) bool) (http2.ErrCode, string, int) {
	c.t.Helper()
	n := 0
	for {
		f := c.read()
		if g, ok := f.(*http2.GoAwayFrame); ok {
			return g.ErrCode, string(g.DebugData()), n
		}
		if ack(f) {
			n++
		}
	}
}

// TestPingFlood checks that a connection that pings in a loop is ended
// with GOAWAY ENHANCE_YOUR_CALM "too_many_pings" after a few acks, as
// grpc-go's keepalive enforcement does, instead of being answered each
// time.
func TestPingFlood(t *testing.T) {
	addr := rawServer(t, &Server{})
	c := newRawClient(t, addr)
	var flood bytes.Buffer
	fw := http2.NewFramer(&flood, nil)
	for i := range 10000 {
		_ = fw.WritePing(false, [8]byte{byte(i)})
	}
	go func() { _, _ = c.nc.Write(flood.Bytes()) }()
	code, debug, acks := c.goAwayCounting(func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && p.IsAck() })
	if code != http2.ErrCodeEnhanceYourCalm || debug != "too_many_pings" || acks > maxPingStrikes+1 {
		t.Fatalf("ping flood: GOAWAY %v %q after %d acks, want ENHANCE_YOUR_CALM too_many_pings after at most %d", code, debug, acks, maxPingStrikes+1)
	}
	legitimateCall(t, dial(t, addr))
}

// TestSettingsFlood checks that a connection that sends SETTINGS in a loop
// is ended with GOAWAY ENHANCE_YOUR_CALM after the burst.
func TestSettingsFlood(t *testing.T) {
	addr := rawServer(t, &Server{})
	c := newRawClient(t, addr)
	var flood bytes.Buffer
	fw := http2.NewFramer(&flood, nil)
	for range 10000 {
		_ = fw.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65535})
	}
	go func() { _, _ = c.nc.Write(flood.Bytes()) }()
	code, debug, acks := c.goAwayCounting(func(f http2.Frame) bool { s, ok := f.(*http2.SettingsFrame); return ok && s.IsAck() })
	if code != http2.ErrCodeEnhanceYourCalm || debug != "too_many_settings" || acks > settingsBurst {
		t.Fatalf("SETTINGS flood: GOAWAY %v %q after %d acks, want ENHANCE_YOUR_CALM too_many_settings after at most %d", code, debug, acks, settingsBurst)
	}
	legitimateCall(t, dial(t, addr))
}

// TestAcksShareWrites checks that the answers to a burst of control frames
// that arrive together go out in a few writes, not one each.
func TestAcksShareWrites(t *testing.T) {
	s := &Server{}
	ratelimiterv1.RegisterRateLimiterServer(s, &limiter{})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &countingListener{Listener: inner}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	c := newRawClient(t, inner.Addr().String())
	const burst = 50
	before := ln.writes.Load()
	var b bytes.Buffer
	fw := http2.NewFramer(&b, nil)
	for range burst {
		_ = fw.WriteSettings()
	}
	if _, err := c.nc.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < burst; {
		if s, ok := c.read().(*http2.SettingsFrame); ok && s.IsAck() {
			n++
		}
	}
	if w := ln.writes.Load() - before; w > burst/5 {
		t.Fatalf("%d acknowledgements took %d writes", burst, w)
	}
}

// TestStalledReader checks that calls whose answers a client holds back
// with a window of 0, never reading, end within WriteTimeout: their
// goroutines and memory are released, and other callers are answered
// meanwhile.
func TestStalledReader(t *testing.T) {
	const calls = 200
	// One worker: the calls beyond it run on goroutines that end with them.
	addr := rawServer(t, &Server{WriteTimeout: 300 * time.Millisecond, MaxConcurrentStreams: calls, Workers: 1})
	legit := dial(t, addr)
	legitimateCall(t, legit) // the client's own goroutines, before the baseline
	baseline := runtime.NumGoroutine()
	heap := heapInUse()

	c := newRawClient(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	msg := grpcMessage(t, 0, &ratelimiterv1.AllowRequest{Key: "k"})
	var b bytes.Buffer
	fw := http2.NewFramer(&b, nil)
	for i := range calls {
		id := uint32(2*i + 1)
		_ = fw.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.block(callHeaders...), EndHeaders: true})
		_ = fw.WriteData(id, true, msg)
	}
	if _, err := c.nc.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	legitimateCall(t, legit)
	// Every call ends: its answer's headers, then RST_STREAM CANCEL when
	// WriteTimeout passes without credit.
	reset := 0
	for reset < calls {
		if r, ok := c.read().(*http2.RSTStreamFrame); ok {
			if r.ErrCode != http2.ErrCodeCancel {
				t.Fatalf("stream %d reset with %v, want CANCEL", r.StreamID, r.ErrCode)
			}
			reset++
		}
	}
	waitGoroutines(t, baseline+2)
	if grown := int64(heapInUse()) - int64(heap); grown > 8<<20 {
		t.Fatalf("the heap grew by %d bytes after the stalled calls ended", grown)
	}
}

// TestContinuationFlood checks that a header block that never ends is cut
// with GOAWAY ENHANCE_YOUR_CALM once it passes the limit, before the
// server holds it all.
func TestContinuationFlood(t *testing.T) {
	addr := rawServer(t, &Server{})
	c := newRawClient(t, addr)
	c.headers(1, false) // no END_HEADERS: written below
	frag := bytes.Repeat([]byte{0x80 | 62}, 16384)
	go func() {
		_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: c.block(callHeaders...)})
		for range (maxHeaderBlock / len(frag)) + 16 {
			if c.fr.WriteContinuation(3, false, frag) != nil {
				return
			}
		}
	}()
	if code := c.goAway(); code != http2.ErrCodeCompression && code != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("CONTINUATION flood: GOAWAY %v", code)
	}
	legitimateCall(t, dial(t, addr))
}

// TestIdleConnections checks that connections that never send the preface
// are closed after HandshakeTimeout.
func TestIdleConnections(t *testing.T) {
	addr := rawServer(t, &Server{HandshakeTimeout: 200 * time.Millisecond, Workers: 1})
	legit := dial(t, addr)
	legitimateCall(t, legit)
	baseline := runtime.NumGoroutine()
	var conns []net.Conn
	for range 50 {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		conns = append(conns, nc)
	}
	legitimateCall(t, legit)
	for _, nc := range conns {
		_ = nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := nc.Read(make([]byte, 1)); err == nil {
			t.Fatal("an idle connection got bytes before its preface")
		}
	}
	waitGoroutines(t, baseline+2)
}

// TestIdleTimeout checks that a connection without calls is closed after
// IdleTimeout with GOAWAY, pings or not, and that one with a call in
// flight is not.
func TestIdleTimeout(t *testing.T) {
	l := &limiter{release: make(chan struct{})}
	addr := serveTest(t, &Server{IdleTimeout: 200 * time.Millisecond}, l)
	idle := newRawClient(t, addr)
	_ = idle.fr.WritePing(false, [8]byte{1})
	if code := idle.goAway(); code != http2.ErrCodeNo {
		t.Fatalf("an idle connection: GOAWAY %v", code)
	}
	if _, err := idle.fr.ReadFrame(); err == nil {
		t.Fatal("the idle connection is still open after its GOAWAY")
	}

	busy := newRawClient(t, addr)
	busy.headers(1, false, callHeaders...)
	_ = busy.fr.WriteData(1, true, grpcMessage(t, 0, &ratelimiterv1.AllowRequest{Key: "block"}))
	for l.inFlight.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	// Twice the idle timeout with the call in flight: no GOAWAY.
	time.Sleep(400 * time.Millisecond)
	close(l.release)
	if a := busy.answer(1); a.fields["grpc-status"] != "0" {
		t.Fatalf("the call in flight: %v", a)
	}

	// A call answered while the reader already waits for a frame, to a
	// client that then sends nothing at all (answer above acknowledges the
	// DATA it reads, and that frame woke the reader): the connection is idle
	// from the end of the call. It used to stay open until the client sent
	// a frame.
	for l.inFlight.Load() != 0 { // the first call's handler is done with l.release
		time.Sleep(time.Millisecond)
	}
	l.release = make(chan struct{})
	quiet := newRawClient(t, addr)
	quiet.headers(1, false, callHeaders...)
	_ = quiet.fr.WriteData(1, true, grpcMessage(t, 0, &ratelimiterv1.AllowRequest{Key: "block"}))
	for l.inFlight.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // the reader is waiting for a frame
	close(l.release)
	start := time.Now()
	for {
		f := quiet.read() // sends nothing back
		if h, ok := f.(*http2.HeadersFrame); ok && h.StreamID == 1 && h.StreamEnded() {
			break
		}
	}
	if code := quiet.goAway(); code != http2.ErrCodeNo {
		t.Fatalf("idle after its last call: GOAWAY %v", code)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("idle after its last call: GOAWAY after %v, want about the idle timeout (200 ms)", d)
	}
}
