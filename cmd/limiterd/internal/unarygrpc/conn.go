package unarygrpc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
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
	buf        *[]byte
	recvWindow int32
	recvUnack  int32
	failure    *status.Status // answer this instead of calling the method
	path       string
	dispatched bool // handed to a worker: the worker counts the call's end

	// Guarded by c.mu.
	sendWindow int64
	closed     bool // answered, or reset by either side
}

// headerBlock is what the reader collects from a block of HEADERS and
// CONTINUATION frames.
type headerBlock struct {
	streamID                 uint32
	endStream                bool
	raw                      int
	size                     uint32
	tooLarge, malformed      bool
	regular                  bool // a regular field was seen: no pseudo-header may follow
	method, path, scheme     string
	contentType, timeout     string
	encoding                 string
	hasMethod, hasPath, isCT bool
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

	// calls counts the streams opened and not yet done: a stream is done
	// when its method returns, or when it ends before its request is
	// complete. A stream the peer resets while its method runs still
	// counts, so that opening and resetting streams in a loop cannot
	// start more methods at once than MaxConcurrentStreams.
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

// serve reads the connection until it ends.
func (c *conn) serve() {
	defer c.close()
	if err := c.handshake(); err != nil {
		return
	}
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				c.resetStream(se.StreamID, se.Code)
				continue
			}
			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				c.connError(http2.ErrCode(ce))
			} else if errors.Is(err, http2.ErrFrameTooLarge) {
				c.connError(http2.ErrCodeFrameSize)
			}
			return
		}
		if err := c.handleFrame(f); err != nil {
			return
		}
	}
}

// handshake reads the client preface, sends the server's SETTINGS and
// raises the connection window.
func (c *conn) handshake() error {
	_ = c.nc.SetReadDeadline(time.Now().Add(c.srv.HandshakeTimeout))
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
		c.connError(http2.ErrCodeProtocol)
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
		if !f.IsAck() {
			c.mu.Lock()
			_ = c.fw.WritePing(true, f.Data)
			c.flushLocked()
			c.mu.Unlock()
		}
	case *http2.RSTStreamFrame:
		return c.onReset(f)
	case *http2.PushPromiseFrame:
		c.connError(http2.ErrCodeProtocol)
		return errGoAway
	case *http2.GoAwayFrame:
		// The peer opens no more streams; those in flight finish.
	}
	// PRIORITY and unknown frame types are ignored.
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
			c.connError(http2.ErrCode(ce))
		} else {
			c.connError(http2.ErrCodeProtocol)
		}
		return errGoAway
	}
	c.mu.Lock()
	defer c.mu.Unlock()
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
		c.goAwayLocked(http2.ErrCodeFlowControl)
		c.flushLocked()
		return errGoAway
	}
	_ = c.fw.WriteSettingsAck()
	c.cond.Broadcast()
	c.flushLocked()
	return nil
}

func (c *conn) onHeaders(f *http2.HeadersFrame) error {
	id := f.Header().StreamID
	c.hb = headerBlock{streamID: id, endStream: f.StreamEnded()}
	if f.HasPriority() && f.Priority.StreamDep == id {
		// A stream depending on itself: a stream error, but its block must
		// still be decoded to keep the table in step.
		c.hb.malformed = true
	}
	return c.onHeaderFragment(id, f.HeaderBlockFragment(), f.HeadersEnded())
}

// onHeaderFragment decodes a fragment of the current header block and,
// at its end, acts on the block.
func (c *conn) onHeaderFragment(id uint32, frag []byte, end bool) error {
	h := &c.hb
	h.raw += len(frag)
	if h.raw > maxHeaderBlock {
		c.connError(http2.ErrCodeEnhanceYourCalm)
		return errGoAway
	}
	if _, err := c.hdec.Write(frag); err != nil {
		c.connError(http2.ErrCodeCompression)
		return errGoAway
	}
	if !end {
		return nil
	}
	if err := c.hdec.Close(); err != nil {
		c.connError(http2.ErrCodeCompression)
		return errGoAway
	}
	return c.onHeaderBlock()
}

// onField records one decoded header field of the current block.
func (c *conn) onField(f hpack.HeaderField) {
	h := &c.hb
	h.size += f.Size()
	if h.size > c.srv.MaxHeaderListSize {
		h.tooLarge = true
		return
	}
	if f.IsPseudo() {
		if h.regular {
			h.malformed = true
			return
		}
		switch f.Name {
		case ":method":
			h.malformed = h.malformed || h.hasMethod
			h.method, h.hasMethod = f.Value, true
		case ":path":
			h.malformed = h.malformed || h.hasPath
			h.path, h.hasPath = f.Value, true
		case ":scheme":
			h.scheme = f.Value
		case ":authority":
		default:
			h.malformed = true
		}
		return
	}
	h.regular = true
	switch f.Name {
	case "content-type":
		h.contentType, h.isCT = f.Value, true
	case "grpc-timeout":
		h.timeout = f.Value
	case "grpc-encoding":
		h.encoding = f.Value
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		h.malformed = true
	case "te":
		h.malformed = h.malformed || f.Value != "trailers"
	default:
		if !validFieldName(f.Name) {
			h.malformed = true
		}
	}
}

// validFieldName reports whether name is a lower-case HTTP/2 field name.
func validFieldName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		b := name[i]
		if b <= ' ' || b >= 0x7f || ('A' <= b && b <= 'Z') || strings.IndexByte(`"(),/:;<=>?@[\]{}`, b) >= 0 {
			return false
		}
	}
	return true
}

// onHeaderBlock acts on a complete header block: a new call, or the end
// of one that is arriving.
func (c *conn) onHeaderBlock() error {
	h := &c.hb
	id := h.streamID
	if st, ok := c.recv[id]; ok {
		// Trailers from the client end its request.
		if !h.endStream {
			c.resetStream(id, http2.ErrCodeProtocol)
			return nil
		}
		c.endRequest(st)
		return nil
	}
	if id%2 == 0 {
		c.connError(http2.ErrCodeProtocol)
		return errGoAway
	}
	c.mu.Lock()
	if id <= c.maxID {
		_, open := c.streams[id]
		c.mu.Unlock()
		if open {
			// HEADERS on a half-closed stream.
			c.resetStream(id, http2.ErrCodeStreamClosed)
			return nil
		}
		// A stream that is closed, or an identifier below one already
		// used: RFC 9113 5.1.1.
		c.connError(http2.ErrCodeProtocol)
		return errGoAway
	}
	c.maxID = id
	refuse := c.goingAway || uint32(c.calls.Load()) >= c.srv.MaxConcurrentStreams
	c.mu.Unlock()
	if refuse {
		c.resetStream(id, http2.ErrCodeRefusedStream)
		return nil
	}
	if h.malformed || !h.hasMethod || !h.hasPath || h.path == "" || h.method != "POST" {
		c.resetStream(id, http2.ErrCodeProtocol)
		return nil
	}

	st := &stream{c: c, id: id, path: h.path, recvWindow: streamWindow}
	switch {
	case h.tooLarge:
		st.failure = status.Newf(codes.ResourceExhausted, "header list size exceeds the limit of %d bytes", c.srv.MaxHeaderListSize)
	case !h.isCT || !isGRPCContentType(h.contentType):
		st.failure = status.Newf(codes.Internal, "invalid gRPC request content-type %q", h.contentType)
	case h.encoding != "" && h.encoding != "identity":
		st.failure = status.Newf(codes.Unimplemented, "grpc: Decompressor is not installed for grpc-encoding %q", h.encoding)
	}
	var timeout time.Duration
	hasDeadline := false
	if st.failure == nil && h.timeout != "" {
		t, ok := parseTimeout(h.timeout)
		if !ok {
			st.failure = status.Newf(codes.Internal, "malformed grpc-timeout: %q", h.timeout)
		}
		timeout, hasDeadline = t, ok
	}
	if st.failure == nil {
		m, ok := c.srv.lookup(h.path)
		if !ok {
			st.failure = status.New(codes.Unimplemented, c.srv.unknownMethod(h.path))
		}
		st.method = m
	}
	if hasDeadline && st.failure == nil {
		st.ctx, st.cancel = context.WithTimeout(context.Background(), timeout)
	} else {
		st.ctx, st.cancel = context.WithCancel(context.Background())
	}

	c.calls.Add(1)
	c.mu.Lock()
	st.sendWindow = c.peerWindow
	c.streams[id] = st
	c.mu.Unlock()
	if h.endStream {
		c.endRequest(st)
		return nil
	}
	c.recv[id] = st
	return nil
}

// isGRPCContentType reports whether ct is application/grpc, alone or with
// a +subtype or parameters.
func isGRPCContentType(ct string) bool {
	const base = "application/grpc"
	if len(ct) < len(base) || !strings.EqualFold(ct[:len(base)], base) {
		return false
	}
	return len(ct) == len(base) || ct[len(base)] == '+' || ct[len(base)] == ';'
}

// endRequest hands a complete request to a worker.
func (c *conn) endRequest(st *stream) {
	delete(c.recv, st.id)
	st.dispatched = true
	c.srv.dispatch(st)
}

func (c *conn) onData(f *http2.DataFrame) error {
	id := f.Header().StreamID
	n := int64(f.Header().Length)
	c.recvConn -= n
	if c.recvConn < 0 {
		c.connError(http2.ErrCodeFlowControl)
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
		c.mu.Lock()
		_, open := c.streams[id]
		idle := id > c.maxID
		c.mu.Unlock()
		switch {
		case idle:
			c.connError(http2.ErrCodeProtocol)
			return errGoAway
		case open:
			// DATA after the request ended.
			c.resetStream(id, http2.ErrCodeStreamClosed)
		}
		// A stream already reset or answered: the frame is dropped.
		return nil
	}
	st.recvWindow -= int32(n)
	if st.recvWindow < 0 {
		delete(c.recv, id)
		c.resetStream(id, http2.ErrCodeFlowControl)
		return nil
	}
	if data := f.Data(); len(data) > 0 && st.failure == nil {
		if st.buf == nil {
			st.buf = getBuffer()
		}
		b := append(*st.buf, data...)
		*st.buf = b
		if len(b) >= 5 {
			size := int(b[1])<<24 | int(b[2])<<16 | int(b[3])<<8 | int(b[4])
			if size > c.srv.MaxRecvMsgSize || size < 0 {
				st.failure = status.Newf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", size, c.srv.MaxRecvMsgSize)
				putBuffer(st.buf)
				st.buf = nil
			} else if len(b) > 5+size {
				st.failure = status.New(codes.Internal, "grpc: client streaming protocol violation: get <nil>, want <EOF>")
				putBuffer(st.buf)
				st.buf = nil
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

func (c *conn) sendWindowUpdate(id, n uint32) {
	c.mu.Lock()
	_ = c.fw.WriteWindowUpdate(id, n)
	c.flushLocked()
	c.mu.Unlock()
}

func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	id := f.Header().StreamID
	c.mu.Lock()
	if id == 0 {
		c.sendConn += int64(f.Increment)
		if c.sendConn > maxWindow {
			c.goAwayLocked(http2.ErrCodeFlowControl)
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
		c.connError(http2.ErrCodeProtocol)
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
		c.finishLocked(st)
	}
	c.mu.Unlock()
	delete(c.recv, id)
	if idle {
		c.connError(http2.ErrCodeProtocol)
		return errGoAway
	}
	return nil
}

// resetStream sends RST_STREAM and forgets the stream.
func (c *conn) resetStream(id uint32, code http2.ErrCode) {
	delete(c.recv, id)
	c.mu.Lock()
	if st, ok := c.streams[id]; ok {
		c.finishLocked(st)
	}
	_ = c.fw.WriteRSTStream(id, code)
	c.flushLocked()
	c.mu.Unlock()
}

// finishLocked closes a stream: its context ends, its slot is free.
func (c *conn) finishLocked(st *stream) {
	if st.closed {
		return
	}
	st.closed = true
	st.cancel()
	if !st.dispatched {
		c.calls.Add(-1)
	}
	delete(c.streams, st.id)
	c.cond.Broadcast() // a writer waiting for its window gives up
	if c.goingAway && len(c.streams) == 0 {
		c.shutdownLocked()
	}
}

// connError sends GOAWAY with code; the caller then ends the connection.
func (c *conn) connError(code http2.ErrCode) {
	c.mu.Lock()
	c.goAwayLocked(code)
	c.flushLocked()
	c.mu.Unlock()
}

func (c *conn) goAwayLocked(code http2.ErrCode) {
	if !c.closed {
		_ = c.fw.WriteGoAway(c.maxID, code, nil)
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
	c.goAwayLocked(http2.ErrCodeNo)
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
	for _, st := range c.streams {
		st.closed = true
		st.cancel()
	}
	clear(c.streams)
	c.cond.Broadcast()
	c.mu.Unlock()
	c.nc.Close()
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
