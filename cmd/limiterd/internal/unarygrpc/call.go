package unarygrpc

import (
	"context"
	"encoding/base64"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// testHookAnswered, when set, runs as a call's worker (unary or
// streaming) returns, after the answer was written.
var testHookAnswered func()

// handle runs a call whose request has arrived and writes its answer.
func (c *conn) handle(st *stream) {
	defer c.freeSlot(st)
	if h := testHookAnswered; h != nil {
		defer h()
	}
	var buf []byte
	if st.buf != nil {
		buf = *st.buf
	}
	defer func() {
		if st.buf != nil {
			putBuffer(st.buf)
			st.buf = nil
		}
	}()
	if st.failure != nil {
		if st.httpStatus != 0 {
			c.writeHTTPError(st)
		} else {
			c.writeStatus(st, st.failure)
		}
		return
	}
	payload, fail := message(buf)
	if fail != nil {
		c.writeStatus(st, fail)
		return
	}
	dec := func(v any) error {
		if err := c.srv.Codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(payload)}, v); err != nil {
			return status.Errorf(codes.Internal, "grpc: error unmarshalling request: %v", err)
		}
		return nil
	}
	cs := &callStream{path: st.path}
	resp, err := st.method.handler(st.method.impl, grpc.NewContextWithServerTransportStream(st.ctx, cs), dec, nil)
	st.trailer = cs.trailer
	if err != nil {
		s, ok := status.FromError(err)
		if !ok {
			s = status.FromContextError(err)
		}
		c.writeStatus(st, s)
		return
	}
	out, err := c.srv.Codec.Marshal(resp)
	if err != nil {
		c.writeStatus(st, status.Newf(codes.Internal, "grpc: error while marshaling: %v", err))
		return
	}
	c.writeResponse(st, out)
	out.Free()
}

// message checks the request's length-prefixed message and returns it.
func message(b []byte) ([]byte, *status.Status) {
	if len(b) < 5 {
		if len(b) == 0 {
			return nil, status.New(codes.Internal, "grpc: the request has no message")
		}
		return nil, status.New(codes.Internal, "grpc: the request ends inside a message header")
	}
	switch b[0] {
	case 0:
	case 1:
		return nil, status.New(codes.Internal, "grpc: compressed flag set with identity or empty encoding")
	default:
		return nil, status.Newf(codes.Internal, "grpc: received unexpected payload format %d", b[0])
	}
	size := int(b[1])<<24 | int(b[2])<<16 | int(b[3])<<8 | int(b[4])
	if len(b)-5 < size {
		return nil, status.Newf(codes.Internal, "grpc: the request ends inside its message (%d of %d bytes)", len(b)-5, size)
	}
	return b[5 : 5+size], nil
}

// startAnswer takes the connection's lock and encodes the response
// headers of st's answer into hbuf; it returns false, without the lock,
// when the stream or the connection is closed.
func (c *conn) startAnswer(st *stream) bool {
	c.mu.Lock()
	if st.closed || c.closed {
		c.mu.Unlock()
		return false
	}
	c.hbuf.Reset()
	_ = c.henc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
	_ = c.henc.WriteField(hpack.HeaderField{Name: "content-type", Value: "application/grpc"})
	return true
}

// writeResponse writes a successful answer: headers, the message, trailers.
func (c *conn) writeResponse(st *stream, msg mem.BufferSlice) {
	if !c.startAnswer(st) {
		return
	}
	c.writeBlockLocked(st.id, false)

	// One DATA frame for the prefix and the message when the windows
	// allow.
	size := msg.Len()
	bp := getBuffer()
	b := append((*bp)[:0], 0, byte(size>>24), byte(size>>16), byte(size>>8), byte(size))
	for _, m := range msg {
		b = append(b, m.ReadOnlyData()...)
	}
	*bp = b
	ok := c.writeDataLocked(st, b, false)
	putBuffer(bp)
	if ok {
		c.hbuf.Reset()
		_ = c.henc.WriteField(hpack.HeaderField{Name: "grpc-status", Value: "0"})
		c.appendTrailerLocked(st.trailer)
		c.writeBlockLocked(st.id, true)
		c.endStreamLocked(st)
	}
	c.endAnswerLocked()
}

// writeStatus answers with trailers only: a call that failed.
func (c *conn) writeStatus(st *stream, s *status.Status) {
	if !c.startAnswer(st) {
		return
	}
	c.appendStatusLocked(s)
	c.appendTrailerLocked(st.trailer)
	c.writeBlockLocked(st.id, true)
	c.endStreamLocked(st)
	c.endAnswerLocked()
}

// writeHTTPError answers a request that is not gRPC as an HTTP server
// would: its status (405, 415), a text body, and gRPC's status fields for
// a client that reads them.
func (c *conn) writeHTTPError(st *stream) {
	c.mu.Lock()
	if st.closed || c.closed {
		c.mu.Unlock()
		return
	}
	body := st.failure.Message() + "\n"
	c.hbuf.Reset()
	_ = c.henc.WriteField(hpack.HeaderField{Name: ":status", Value: strconv.Itoa(st.httpStatus)})
	_ = c.henc.WriteField(hpack.HeaderField{Name: "content-type", Value: "text/plain; charset=utf-8"})
	_ = c.henc.WriteField(hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(len(body))})
	c.appendStatusLocked(st.failure)
	c.writeBlockLocked(st.id, st.head)
	if st.head || c.writeDataLocked(st, []byte(body), true) {
		c.endStreamLocked(st)
	}
	c.endAnswerLocked()
}

// endStreamLocked closes a stream whose answer ended. A request that has
// not ended is told to stop with RST_STREAM NO_ERROR (RFC 9113 8.1). The
// call's method has returned: its slot is free before the frames that end
// the stream leave.
func (c *conn) endStreamLocked(st *stream) {
	if st.dispatched {
		c.freeSlot(st)
	}
	if st.remoteDone {
		c.finishLocked(st, false)
		return
	}
	c.resetLocked(st.id, http2.ErrCodeNo)
}

// freeSlot stops counting a dispatched call in calls, once.
func (c *conn) freeSlot(st *stream) {
	if st.freed.CompareAndSwap(false, true) {
		c.calls.Add(-1)
	}
}

// endAnswerLocked unlocks mu after an answer was written and sees that it
// is flushed. Answers tend to be ready together (a batch of store calls
// ends at once): the first writer yields before flushing, so that the
// others can add theirs to the same write.
func (c *conn) endAnswerLocked() {
	if c.flushDue {
		c.mu.Unlock()
		return
	}
	c.flushDue = true
	c.mu.Unlock()
	runtime.Gosched()
	c.mu.Lock()
	c.flushDue = false
	c.flushNowLocked()
	c.mu.Unlock()
}

// appendStatusLocked encodes grpc-status, grpc-message and
// grpc-status-details-bin into hbuf.
func (c *conn) appendStatusLocked(s *status.Status) {
	_ = c.henc.WriteField(hpack.HeaderField{Name: "grpc-status", Value: strconv.Itoa(int(s.Code()))})
	if m := s.Message(); m != "" {
		_ = c.henc.WriteField(hpack.HeaderField{Name: "grpc-message", Value: encodeMessage(m), Sensitive: true})
	}
	if p := s.Proto(); len(p.GetDetails()) > 0 {
		if b, err := proto.Marshal(p); err == nil {
			_ = c.henc.WriteField(hpack.HeaderField{Name: "grpc-status-details-bin", Value: base64.RawStdEncoding.EncodeToString(b), Sensitive: true})
		}
	}
}

// writeBlockLocked writes the header block in hbuf on stream id: a
// HEADERS frame and as many CONTINUATION frames as the peer's frame size
// needs.
func (c *conn) writeBlockLocked(id uint32, endStream bool) {
	c.pings.forgive = true
	block := c.hbuf.Bytes()
	max := int(c.peerFrame)
	first := block
	if len(first) > max {
		first = first[:max]
	}
	block = block[len(first):]
	_ = c.fw.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: endStream, EndHeaders: len(block) == 0})
	for len(block) > 0 {
		n := min(len(block), max)
		_ = c.fw.WriteContinuation(id, n == len(block), block[:n])
		block = block[n:]
	}
}

// writeDataLocked writes b in DATA frames as the send windows allow,
// the last one ending the stream when end is set. When the windows are used
// up it waits for WINDOW_UPDATE, but no longer than the call's deadline or
// WriteTimeout without credit: then it resets the stream (CANCEL). It
// reports false when the stream or the connection closed.
func (c *conn) writeDataLocked(st *stream, b []byte, end bool) bool {
	var until time.Time // give up waiting for credit then
	for len(b) > 0 {
		if st.closed || c.closed {
			return false
		}
		n := int64(len(b))
		n = min(n, c.sendConn, st.sendWindow, int64(c.peerFrame))
		if n <= 0 {
			if until.IsZero() {
				until = time.Now().Add(c.srv.WriteTimeout)
			}
			if !c.waitCreditLocked(st, until) {
				c.resetLocked(st.id, http2.ErrCodeCancel)
				return false
			}
			continue
		}
		_ = c.fw.WriteData(st.id, end && n == int64(len(b)), b[:n])
		c.pings.forgive = true
		c.sendConn -= n
		st.sendWindow -= n
		b = b[n:]
		until = time.Time{}
	}
	return !st.closed && !c.closed
}

// waitCreditLocked lets the other frames out and waits until the windows
// may have grown, the stream or the connection closed, or the call's
// context ended; it reports false when the call is to give up: its
// context ended, or until passed without credit.
func (c *conn) waitCreditLocked(st *stream, until time.Time) bool {
	c.flushNowLocked()
	if st.ctx.Err() != nil || !time.Now().Before(until) {
		return false
	}
	wake := func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	}
	t := time.AfterFunc(time.Until(until), wake)
	stop := context.AfterFunc(st.ctx, wake)
	c.cond.Wait()
	t.Stop()
	stop()
	return st.ctx.Err() == nil && time.Now().Before(until)
}

// encodeMessage percent-encodes a grpc-message value as gRPC's HTTP/2
// mapping requires: bytes outside printable ASCII, and '%'.
func encodeMessage(m string) string {
	clean := true
	for i := 0; i < len(m); i++ {
		if b := m[i]; b < ' ' || b > '~' || b == '%' {
			clean = false
			break
		}
	}
	if clean {
		return m
	}
	const hex = "0123456789ABCDEF"
	out := make([]byte, 0, len(m)+16)
	for i := 0; i < len(m); i++ {
		if b := m[i]; b < ' ' || b > '~' || b == '%' {
			out = append(out, '%', hex[b>>4], hex[b&15])
		} else {
			out = append(out, b)
		}
	}
	return string(out)
}

// parseTimeout reads a grpc-timeout value: 1 to 8 digits and a unit.
func parseTimeout(v string) (time.Duration, bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	var unit time.Duration
	switch v[len(v)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	var n int64
	for i := 0; i < len(v)-1; i++ {
		d := v[i]
		if d < '0' || d > '9' {
			return 0, false
		}
		n = n*10 + int64(d-'0')
	}
	// 99999999 hours overflows a Duration: cap it as grpc-go does.
	if unit == time.Hour && n > int64(maxDuration/time.Hour) {
		return maxDuration, true
	}
	if unit == time.Minute && n > int64(maxDuration/time.Minute) {
		return maxDuration, true
	}
	return time.Duration(n) * unit, true
}

const maxDuration = time.Duration(1<<63 - 1)
