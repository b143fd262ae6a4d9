package unarygrpc

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Flow control: the connection's receive window is raised to connWindow at
// the start and topped up when half of it has arrived, since every byte is
// taken into its stream's buffer at once; a stream's window stays at
// HTTP/2's default, topped up the same way while its request is arriving,
// so that what a connection holds is bounded by its streams' requests (at
// most MaxRecvMsgSize each).
const (
	connWindow     = 1 << 20
	streamWindow   = 65535
	maxWindow      = 1<<31 - 1
	bufferSize     = 32 << 10
	maxHeaderBlock = 4 << 20 // raw header block bytes before the connection is refused
)

// stream is one call.
type stream struct {
	c      *conn
	id     uint32
	method *method
	ctx    context.Context
	cancel context.CancelFunc

	// Reader only, until the call is dispatched.
	buf           *[]byte
	recvWindow    int32 // guarded by c.mu on a streaming call
	recvUnack     int32
	path          string
	contentLength int64 // -1 when the request has none
	received      int64 // DATA payload bytes so far
	dispatched    bool  // handed to a worker: the worker counts the call's end
	// freed: a dispatched call no longer counts in calls (freeSlot).
	freed atomic.Bool

	// Set before the stream is published, read-only after.
	failure    *status.Status // answer this instead of calling the method
	httpStatus int            // with failure: answer as HTTP, not gRPC (not a gRPC request)
	head       bool           // a HEAD request: an answer without a body
	early      bool           // answered before its request ends: the rest is discarded

	// The worker running the call only: trailers its handler set
	// (grpc.SetTrailer), sent with the status.
	trailer metadata.MD

	// Guarded by c.mu.
	sendWindow  int64
	closed      bool // answered, or reset by either side
	remoteDone  bool // the request ended (END_STREAM from the peer)
	headersSent bool // a streaming call's response headers are out
	in          []byte
	notify      chan struct{} // a streaming call: data arrived or the request ended
}

// conn is one HTTP/2 connection.
type conn struct {
	srv *Server
	nc  net.Conn
	br  *bufio.Reader
	fr  *http2.Framer // reading, by the reader goroutine only

	// Reader only.
	hdec      *hpack.Decoder
	hb        headerBlock
	recv      map[uint32]*stream // streams whose request is still arriving
	recvConn  int64              // the connection's receive window left
	recvUnack int64

	// mu guards what follows and every write to the connection.
	mu         sync.Mutex
	idleSince  time.Time // when the read deadline of IdleTimeout was set; zero when none is
	cond       sync.Cond // on mu: send windows grew, or the connection closed
	bw         *bufio.Writer
	fw         *http2.Framer
	henc       *hpack.Encoder
	hbuf       bytes.Buffer
	streams    map[uint32]*stream // open streams: receiving or being answered
	maxID      uint32             // the highest stream the peer opened
	sendConn   int64
	peerWindow int64 // the peer's SETTINGS_INITIAL_WINDOW_SIZE
	peerFrame  uint32
	goingAway  bool
	closed     bool
	werr       error
	gone       closedStreams // streams closed lately
	pings      pingPolicy
	settings   settingsPolicy
	ageTimer   *time.Timer // MaxConnectionAge's, then its grace's; nil when none runs

	// calls counts the streams opened and not yet done: a stream is done
	// when its answer ends (before the frame that ends it is flushed, so
	// that a peer opening its next stream as soon as it reads that frame
	// finds the slot free), when its method returns, or when it ends
	// before its request is complete. A stream the peer resets while its
	// method runs still counts, so that opening and resetting streams in
	// a loop cannot start more methods at once than MaxConcurrentStreams.
	calls atomic.Int32

	// flushDue: a call's answer is in bw and the goroutine that wrote it
	// will flush, after letting the other calls that are ready write
	// theirs.
	flushDue bool
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{
		srv:        s,
		nc:         nc,
		br:         bufio.NewReaderSize(nc, bufferSize),
		bw:         bufio.NewWriterSize(deadlineWriter{nc: nc, d: s.WriteTimeout}, bufferSize),
		recv:       make(map[uint32]*stream),
		streams:    make(map[uint32]*stream),
		recvConn:   connWindow,
		sendConn:   65535,
		peerWindow: 65535,
		peerFrame:  16384,
		pings:      pingPolicy{minTime: s.KeepalivePolicy.MinTime, permitWithoutCalls: s.KeepalivePolicy.PermitWithoutStream},
	}
	c.cond.L = &c.mu
	c.fr = http2.NewFramer(nil, c.br)
	c.fr.SetReuseFrames()
	c.fr.SetMaxReadFrameSize(16384) // HTTP/2's default, which the server keeps
	c.fw = http2.NewFramer(c.bw, nil)
	c.henc = hpack.NewEncoder(&c.hbuf)
	c.hdec = hpack.NewDecoder(4096, c.onField)
	c.hdec.SetMaxStringLength(int(s.MaxHeaderListSize))
	return c
}

// errGoAway ends the read loop after a GOAWAY was sent for a connection
// error.
var errGoAway = errors.New("unarygrpc: connection error")

// serve reads the connection until it ends. What the reader writes
// (acknowledgements, WINDOW_UPDATE, RST_STREAM) waits in the write buffer
// until no whole frame is left to read, so that a burst of frames is
// answered in one write.
func (c *conn) serve() {
	defer c.dropRecv()
	defer c.close()
	if err := c.handshake(); err != nil {
		return
	}
	c.startAge()
	for {
		if !c.frameBuffered() {
			c.mu.Lock()
			c.flushLocked()
			if !c.goingAway {
				c.setIdleDeadlineLocked(len(c.streams) == 0)
			}
			c.mu.Unlock()
		}
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.mu.Lock()
			idle := !c.idleSince.IsZero()
			c.mu.Unlock()
			if idle && errors.Is(err, os.ErrDeadlineExceeded) {
				c.connError(http2.ErrCodeNo, "idle")
				return
			}
			var se http2.StreamError
			if errors.As(err, &se) {
				c.resetStream(se.StreamID, se.Code)
				continue
			}
			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				c.connError(http2.ErrCode(ce), "")
			} else if errors.Is(err, http2.ErrFrameTooLarge) {
				c.connError(http2.ErrCodeFrameSize, "")
			}
			return
		}
		if err := c.handleFrame(f); err != nil {
			return
		}
	}
}

// startAge starts the wait of MaxConnectionAge, jittered by up to a tenth
// either way.
func (c *conn) startAge() {
	age := c.srv.MaxConnectionAge
	if age <= 0 {
		return
	}
	age += time.Duration((rand.Float64()*0.2 - 0.1) * float64(age))
	c.mu.Lock()
	if !c.closed {
		c.ageTimer = time.AfterFunc(age, c.ageOut)
	}
	c.mu.Unlock()
}

// ageOut starts a graceful stop of a connection that reached
// MaxConnectionAge and, with calls in flight, the wait of its grace, after
// which the connection is closed: the reader then ends it.
func (c *conn) ageOut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.goingAway || c.closed {
		return
	}
	c.goAwayLocked(http2.ErrCodeNo, "max_age")
	c.flushLocked()
	if len(c.streams) == 0 {
		c.shutdownLocked()
		return
	}
	if g := c.srv.MaxConnectionAgeGrace; g > 0 {
		c.ageTimer = time.AfterFunc(g, func() { c.nc.Close() })
	}
}

// setIdleDeadlineLocked starts or stops the wait of IdleTimeout for a
// frame on a connection without calls in flight (c.mu held): the reader
// calls it before each read, and the end of the last call does too, since
// the reader may already be waiting for a frame that never comes. Frames
// that open no call (PING, WINDOW_UPDATE) do not restart the wait.
func (c *conn) setIdleDeadlineLocked(idle bool) {
	if c.srv.IdleTimeout <= 0 || idle == !c.idleSince.IsZero() {
		return
	}
	if idle {
		c.idleSince = time.Now()
		_ = c.nc.SetReadDeadline(c.idleSince.Add(c.srv.IdleTimeout))
		return
	}
	c.idleSince = time.Time{}
	_ = c.nc.SetReadDeadline(time.Time{})
}

// frameBuffered reports whether a whole frame is in the read buffer.
func (c *conn) frameBuffered() bool {
	if c.br.Buffered() < 9 {
		return false
	}
	h, _ := c.br.Peek(9)
	n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
	return c.br.Buffered() >= 9+n
}

// handshake reads the client preface, sends the server's SETTINGS and
// raises the connection window.
func (c *conn) handshake() error {
	// HandshakeTimeout bounds the whole of it, TLS included, from the
	// connection's start, as in grpc-go.
	deadline := time.Now().Add(c.srv.HandshakeTimeout)
	if tc, ok := c.nc.(*tls.Conn); ok {
		// The TLS handshake writes as well as reads: both wait.
		_ = tc.SetDeadline(deadline)
		if err := tc.Handshake(); err != nil {
			return err
		}
		_ = tc.SetWriteDeadline(time.Time{})
	}
	_ = c.nc.SetReadDeadline(deadline)
	var p [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(c.br, p[:]); err != nil || string(p[:]) != http2.ClientPreface {
		return errors.New("unarygrpc: no HTTP/2 client preface")
	}
	c.mu.Lock()
	_ = c.fw.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: c.srv.MaxConcurrentStreams},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: c.srv.MaxHeaderListSize},
	)
	_ = c.fw.WriteWindowUpdate(0, connWindow-65535)
	c.flushLocked()
	c.mu.Unlock()
	f, err := c.fr.ReadFrame()
	if err != nil {
		return err
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		c.connError(http2.ErrCodeProtocol, "")
		return errGoAway
	}
	if err := c.handleFrame(sf); err != nil {
		return err
	}
	return c.nc.SetReadDeadline(time.Time{})
}

// handleFrame acts on one frame; an error ends the connection.
func (c *conn) handleFrame(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		return c.onSettings(f)
	case *http2.HeadersFrame:
		return c.onHeaders(f)
	case *http2.ContinuationFrame:
		return c.onHeaderFragment(f.Header().StreamID, f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.PingFrame:
		return c.onPing(f)
	case *http2.RSTStreamFrame:
		return c.onReset(f)
	case *http2.PriorityFrame:
		// A stream depending on itself: RFC 9113 5.3.1.
		if f.StreamDep == f.StreamID {
			c.resetStream(f.StreamID, http2.ErrCodeProtocol)
		}
	case *http2.PushPromiseFrame:
		c.connError(http2.ErrCodeProtocol, "")
		return errGoAway
	case *http2.GoAwayFrame:
		// The peer opens no more streams; those in flight finish.
	}
	// Unknown frame types are ignored.
	return nil
}

// onPing answers a PING, and ends a connection that pings more often than
// the keepalive policy permits.
func (c *conn) onPing(f *http2.PingFrame) error {
	if f.IsAck() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pings.onPing(time.Now(), len(c.streams)) {
		c.goAwayLocked(http2.ErrCodeEnhanceYourCalm, "too_many_pings")
		c.flushLocked()
		return errGoAway
	}
	_ = c.fw.WritePing(true, f.Data)
	return nil
}

func (c *conn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	err := f.ForeachSetting(func(s http2.Setting) error { return s.Valid() })
	if err != nil {
		var ce http2.ConnectionError
		if errors.As(err, &ce) {
			c.connError(http2.ErrCode(ce), "")
		} else {
			c.connError(http2.ErrCodeProtocol, "")
		}
		return errGoAway
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.settings.onSettings(time.Now()) {
		c.goAwayLocked(http2.ErrCodeEnhanceYourCalm, "too_many_settings")
		c.flushLocked()
		return errGoAway
	}
	overflow := false
	_ = f.ForeachSetting(func(s http2.Setting) error {
		switch s.ID {
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - c.peerWindow
			c.peerWindow = int64(s.Val)
			for _, st := range c.streams {
				st.sendWindow += delta
				if st.sendWindow > maxWindow {
					overflow = true
				}
			}
		case http2.SettingMaxFrameSize:
			c.peerFrame = s.Val
		case http2.SettingHeaderTableSize:
			c.henc.SetMaxDynamicTableSizeLimit(s.Val)
		}
		return nil
	})
	if overflow {
		c.goAwayLocked(http2.ErrCodeFlowControl, "")
		c.flushLocked()
		return errGoAway
	}
	_ = c.fw.WriteSettingsAck()
	c.cond.Broadcast()
	return nil
}

// endRequest acts on the end of a request: a unary call is handed to a
// worker, a streaming call's RecvMsg sees the end.
func (c *conn) endRequest(st *stream) {
	delete(c.recv, st.id)
	if st.notify != nil {
		c.mu.Lock()
		st.remoteDone = true
		c.mu.Unlock()
		st.signal()
		return
	}
	if st.contentLength >= 0 && st.received != st.contentLength && !st.early {
		// RFC 9113 8.1.1: a content-length that the DATA frames do not
		// match makes the request malformed.
		c.resetStream(st.id, http2.ErrCodeProtocol)
		return
	}
	c.mu.Lock()
	st.remoteDone = true
	c.mu.Unlock()
	st.dispatched = true
	c.srv.dispatch(st)
}

// answerEarly answers a unary call whose request is refused before it
// ends (a message over the limit): its answer goes out now, and the rest
// of the request is discarded as it arrives.
func (c *conn) answerEarly(st *stream, s *status.Status) {
	delete(c.recv, st.id)
	if st.buf != nil {
		putBuffer(st.buf)
		st.buf = nil
	}
	st.failure, st.early = s, true
	st.dispatched = true
	c.srv.dispatch(st)
}

func (c *conn) onData(f *http2.DataFrame) error {
	id := f.Header().StreamID
	n := int64(f.Header().Length)
	c.recvConn -= n
	if c.recvConn < 0 {
		c.connError(http2.ErrCodeFlowControl, "")
		return errGoAway
	}
	c.recvUnack += n
	if c.recvUnack >= connWindow/2 {
		c.sendWindowUpdate(0, uint32(c.recvUnack))
		c.recvConn += c.recvUnack
		c.recvUnack = 0
	}
	st, ok := c.recv[id]
	if !ok {
		return c.onDataNotReceiving(id, f.StreamEnded())
	}
	if st.notify != nil {
		return c.onStreamData(st, f)
	}
	st.recvWindow -= int32(n)
	if st.recvWindow < 0 {
		c.resetStream(id, http2.ErrCodeFlowControl)
		return nil
	}
	data := f.Data()
	st.received += int64(len(data))
	if st.contentLength >= 0 && st.received > st.contentLength {
		c.resetStream(id, http2.ErrCodeProtocol)
		return nil
	}
	if len(data) > 0 && st.failure == nil {
		if st.buf == nil {
			st.buf = getBuffer()
		}
		b := append(*st.buf, data...)
		*st.buf = b
		if len(b) >= 5 {
			size := int(b[1])<<24 | int(b[2])<<16 | int(b[3])<<8 | int(b[4])
			if size > c.srv.MaxRecvMsgSize || size < 0 {
				st.remoteDone = f.StreamEnded()
				c.answerEarly(st, status.Newf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", size, c.srv.MaxRecvMsgSize))
				return nil
			} else if len(b) > 5+size {
				st.remoteDone = f.StreamEnded()
				c.answerEarly(st, status.New(codes.Internal, "grpc: client streaming protocol violation: get <nil>, want <EOF>"))
				return nil
			}
		}
	}
	if f.StreamEnded() {
		c.endRequest(st)
		return nil
	}
	st.recvUnack += int32(n)
	if st.recvUnack >= streamWindow/2 {
		c.sendWindowUpdate(id, uint32(st.recvUnack))
		st.recvWindow += st.recvUnack
		st.recvUnack = 0
	}
	return nil
}

// onDataNotReceiving acts on DATA for a stream whose request is not being
// read: idle, answered early, half-closed or closed (RFC 9113 5.1).
func (c *conn) onDataNotReceiving(id uint32, end bool) error {
	c.mu.Lock()
	st, open := c.streams[id]
	idle := id > c.maxID
	gone, byUs := c.gone.find(id)
	discard := open && st.early && !st.remoteDone
	if discard && end {
		st.remoteDone = true
	}
	c.mu.Unlock()
	switch {
	case idle:
		c.connError(http2.ErrCodeProtocol, "")
		return errGoAway
	case discard, gone && byUs:
		// The rest of a request answered early, or frames the peer sent
		// before it saw our RST_STREAM: discarded.
	default:
		c.resetStream(id, http2.ErrCodeStreamClosed)
	}
	return nil
}

func (c *conn) sendWindowUpdate(id, n uint32) {
	c.mu.Lock()
	_ = c.fw.WriteWindowUpdate(id, n)
	c.mu.Unlock()
}

func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	id := f.Header().StreamID
	c.mu.Lock()
	if id == 0 {
		c.sendConn += int64(f.Increment)
		if c.sendConn > maxWindow {
			c.goAwayLocked(http2.ErrCodeFlowControl, "")
			c.flushLocked()
			c.mu.Unlock()
			return errGoAway
		}
		c.cond.Broadcast()
		c.mu.Unlock()
		return nil
	}
	st, ok := c.streams[id]
	idle := id > c.maxID
	overflow := false
	if ok {
		st.sendWindow += int64(f.Increment)
		overflow = st.sendWindow > maxWindow
		c.cond.Broadcast()
	}
	c.mu.Unlock()
	switch {
	case idle:
		c.connError(http2.ErrCodeProtocol, "")
		return errGoAway
	case overflow:
		c.resetStream(id, http2.ErrCodeFlowControl)
	}
	return nil
}

func (c *conn) onReset(f *http2.RSTStreamFrame) error {
	id := f.Header().StreamID
	c.mu.Lock()
	idle := id > c.maxID
	if st, ok := c.streams[id]; ok {
		c.finishLocked(st, false)
	}
	c.mu.Unlock()
	delete(c.recv, id)
	if idle {
		c.connError(http2.ErrCodeProtocol, "")
		return errGoAway
	}
	return nil
}

// resetStream sends RST_STREAM and forgets the stream.
func (c *conn) resetStream(id uint32, code http2.ErrCode) {
	delete(c.recv, id)
	c.mu.Lock()
	c.resetLocked(id, code)
	c.mu.Unlock()
}

// resetLocked writes RST_STREAM, closes the stream if it is open, and
// remembers that frames the peer still sends on it are to be discarded.
func (c *conn) resetLocked(id uint32, code http2.ErrCode) {
	if st, ok := c.streams[id]; ok {
		c.finishLocked(st, true)
	} else {
		c.gone.add(id, true)
	}
	_ = c.fw.WriteRSTStream(id, code)
}

// finishLocked closes a stream: its context ends, its slot is free. byUs
// tells whether the server reset it.
func (c *conn) finishLocked(st *stream, byUs bool) {
	if st.closed {
		return
	}
	st.closed = true
	st.cancel()
	if !st.dispatched {
		c.calls.Add(-1)
		if st.buf != nil {
			putBuffer(st.buf)
			st.buf = nil
		}
	}
	delete(c.streams, st.id)
	if len(c.streams) == 0 && !c.goingAway {
		c.setIdleDeadlineLocked(true)
	}
	c.gone.add(st.id, byUs)
	c.cond.Broadcast() // a writer waiting for its window gives up
	if st.notify != nil {
		st.signal()
	}
	if c.goingAway && len(c.streams) == 0 {
		c.shutdownLocked()
	}
}

// connError sends GOAWAY with code and debug data; the caller then ends
// the connection.
func (c *conn) connError(code http2.ErrCode, debug string) {
	c.mu.Lock()
	c.goAwayLocked(code, debug)
	c.flushLocked()
	c.mu.Unlock()
}

func (c *conn) goAwayLocked(code http2.ErrCode, debug string) {
	if !c.closed {
		var d []byte
		if debug != "" {
			d = []byte(debug)
		}
		_ = c.fw.WriteGoAway(c.maxID, code, d)
	}
	c.goingAway = true
}

// goAway starts a graceful stop of the connection: GOAWAY, no new calls,
// close when the calls in flight are answered.
func (c *conn) goAway() {
	c.mu.Lock()
	if c.goingAway || c.closed {
		c.flushLocked()
		c.mu.Unlock()
		return
	}
	c.goAwayLocked(http2.ErrCodeNo, "")
	c.flushLocked()
	if len(c.streams) == 0 {
		c.shutdownLocked()
	}
	c.mu.Unlock()
}

// shutdownLocked flushes what is written and closes the connection's
// writing side, so that the peer sees the end after the last answer; the
// reader then ends.
func (c *conn) shutdownLocked() {
	if c.closed {
		return
	}
	_ = c.bw.Flush()
	if tc, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
	}
	// Unblock the reader even if the peer keeps the connection open.
	_ = c.nc.SetReadDeadline(time.Now().Add(time.Second))
}

// close ends the connection: every call's context is canceled and waiting
// writers give up.
func (c *conn) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	if c.ageTimer != nil {
		c.ageTimer.Stop()
	}
	for _, st := range c.streams {
		st.closed = true
		st.cancel()
	}
	clear(c.streams)
	c.cond.Broadcast()
	c.mu.Unlock()
	c.nc.Close()
}

// dropRecv gives back the buffers of the requests still arriving when the
// connection ended (reader only: close may run on the goroutine that
// stops the server).
func (c *conn) dropRecv() {
	for id, st := range c.recv {
		if st.buf != nil {
			putBuffer(st.buf)
			st.buf = nil
		}
		delete(c.recv, id)
	}
}

// flushLocked writes out bw unless an answer's writer is about to.
func (c *conn) flushLocked() {
	if c.flushDue {
		return
	}
	c.flushNowLocked()
}

func (c *conn) flushNowLocked() {
	if c.closed || c.bw.Buffered() == 0 {
		return
	}
	if err := c.bw.Flush(); err != nil && c.werr == nil {
		c.werr = err
		// The reader sees the closed connection and ends it.
		c.nc.Close()
	}
}

// deadlineWriter writes to a connection with a deadline on each write, so
// that a peer that stops reading cannot hold the connection's writers, and
// the lock they write under, for longer than d.
type deadlineWriter struct {
	nc net.Conn
	d  time.Duration
}

func (w deadlineWriter) Write(p []byte) (int, error) {
	if err := w.nc.SetWriteDeadline(time.Now().Add(w.d)); err != nil {
		return 0, err
	}
	return w.nc.Write(p)
}

// bufPool holds request buffers.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

func getBuffer() *[]byte { return bufPool.Get().(*[]byte) }

func putBuffer(b *[]byte) {
	if cap(*b) <= 64<<10 {
		*b = (*b)[:0]
		bufPool.Put(b)
	}
}
