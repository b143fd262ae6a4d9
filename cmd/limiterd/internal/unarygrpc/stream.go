package unarygrpc

import (
	"context"
	"io"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Streaming calls (server reflection, health's Watch) run on a goroutine
// of their own from their headers on: the reader appends their DATA to
// the stream's input, which RecvMsg takes a message at a time. The
// stream's window is topped up while the input holds no whole message, so
// that what waits for RecvMsg is at most one message and a window.

// signal wakes a RecvMsg waiting on the stream.
func (st *stream) signal() {
	select {
	case st.notify <- struct{}{}:
	default:
	}
}

// onStreamData appends a streaming call's DATA to its input.
func (c *conn) onStreamData(st *stream, f *http2.DataFrame) error {
	id := f.Header().StreamID
	n := int32(f.Header().Length)
	c.mu.Lock()
	if st.closed {
		// Ended by its handler or a reset: discard as any closed stream.
		delete(c.recv, id)
		c.mu.Unlock()
		return c.onDataNotReceiving(id, f.StreamEnded())
	}
	st.recvWindow -= n
	if st.recvWindow < 0 {
		delete(c.recv, id)
		c.resetLocked(id, http2.ErrCodeFlowControl)
		c.mu.Unlock()
		return nil
	}
	st.in = append(st.in, f.Data()...)
	st.recvUnack += n
	if f.StreamEnded() {
		st.remoteDone = true
		delete(c.recv, id)
	} else {
		c.creditStreamLocked(st)
	}
	c.mu.Unlock()
	st.signal()
	return nil
}

// creditStreamLocked returns the window a streaming call's input has
// used, unless the input holds a whole message (or the start of one
// over the limit) that RecvMsg has yet to take.
func (c *conn) creditStreamLocked(st *stream) {
	if st.recvUnack < streamWindow/2 || st.remoteDone {
		return
	}
	if len(st.in) >= 5 {
		size := int(st.in[1])<<24 | int(st.in[2])<<16 | int(st.in[3])<<8 | int(st.in[4])
		if size > c.srv.MaxRecvMsgSize || len(st.in) >= 5+size {
			return
		}
	}
	_ = c.fw.WriteWindowUpdate(st.id, uint32(st.recvUnack))
	st.recvWindow += st.recvUnack
	st.recvUnack = 0
}

// runStream runs a streaming call's handler and writes its status.
func (c *conn) runStream(st *stream) {
	defer c.freeSlot(st)
	if h := testHookAnswered; h != nil {
		defer h()
	}
	ss := &serverStream{c: c, st: st}
	err := st.method.stream.Handler(st.method.impl, ss)
	s := status.New(codes.OK, "")
	if err != nil {
		var ok bool
		if s, ok = status.FromError(err); !ok {
			s = status.FromContextError(err)
		}
	}
	c.mu.Lock()
	if st.closed || c.closed {
		c.mu.Unlock()
		return
	}
	c.hbuf.Reset()
	if !st.headersSent {
		c.encodeResponseHeadersLocked()
	}
	c.appendStatusLocked(s)
	c.writeBlockLocked(st.id, true)
	c.endStreamLocked(st)
	c.flushNowLocked()
	c.mu.Unlock()
}

// encodeResponseHeadersLocked encodes the fields that open an answer.
func (c *conn) encodeResponseHeadersLocked() {
	_ = c.henc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
	_ = c.henc.WriteField(hpack.HeaderField{Name: "content-type", Value: "application/grpc"})
}

// serverStream is a streaming call as its handler sees it. Metadata is
// not served: headers and trailers set by the handler are dropped.
type serverStream struct {
	c  *conn
	st *stream
}

var _ grpc.ServerStream = (*serverStream)(nil)

func (s *serverStream) SetHeader(metadata.MD) error  { return nil }
func (s *serverStream) SendHeader(metadata.MD) error { return nil }
func (s *serverStream) SetTrailer(metadata.MD)       {}
func (s *serverStream) Context() context.Context     { return s.st.ctx }

// SendMsg writes one message, after the response headers the first time.
func (s *serverStream) SendMsg(m any) error {
	c, st := s.c, s.st
	out, err := c.srv.Codec.Marshal(m)
	if err != nil {
		return status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
	}
	defer out.Free()
	size := out.Len()
	b := make([]byte, 0, 5+size)
	b = append(b, 0, byte(size>>24), byte(size>>16), byte(size>>8), byte(size))
	for _, m := range out {
		b = append(b, m.ReadOnlyData()...)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.closed || c.closed {
		return s.ended()
	}
	if !st.headersSent {
		c.hbuf.Reset()
		c.encodeResponseHeadersLocked()
		c.writeBlockLocked(st.id, false)
		st.headersSent = true
	}
	ok := c.writeDataLocked(st, b, false)
	c.flushNowLocked()
	if !ok {
		return s.ended()
	}
	return nil
}

// ended is the error of a send or receive on a call that has ended.
func (s *serverStream) ended() error {
	if err := s.st.ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Canceled, "unarygrpc: the call ended")
}

// RecvMsg takes the next message of the request; io.EOF when the request
// ended after a whole message.
func (s *serverStream) RecvMsg(m any) error {
	c, st := s.c, s.st
	for {
		c.mu.Lock()
		msg, fail, ok := c.takeMessageLocked(st)
		done, closed := st.remoteDone, st.closed || c.closed
		c.mu.Unlock()
		switch {
		case fail != nil:
			return fail.Err()
		case ok:
			if err := c.srv.Codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(msg)}, m); err != nil {
				return status.Errorf(codes.Internal, "grpc: error unmarshalling request: %v", err)
			}
			return nil
		case closed:
			return s.ended()
		case done:
			c.mu.Lock()
			rest := len(st.in)
			c.mu.Unlock()
			if rest > 0 {
				return status.New(codes.Internal, "grpc: the request ends inside a message").Err()
			}
			return io.EOF
		}
		select {
		case <-st.notify:
		case <-st.ctx.Done():
		}
	}
}

// takeMessageLocked takes the first message of a streaming call's input
// if it is whole, and returns the window it used once no whole message is
// left.
func (c *conn) takeMessageLocked(st *stream) ([]byte, *status.Status, bool) {
	if len(st.in) < 5 {
		return nil, nil, false
	}
	if st.in[0] != 0 {
		return nil, status.New(codes.Internal, "grpc: compressed flag set with identity or empty encoding"), false
	}
	size := int(st.in[1])<<24 | int(st.in[2])<<16 | int(st.in[3])<<8 | int(st.in[4])
	if size > c.srv.MaxRecvMsgSize {
		return nil, status.Newf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", size, c.srv.MaxRecvMsgSize), false
	}
	if len(st.in) < 5+size {
		return nil, nil, false
	}
	msg := append([]byte(nil), st.in[5:5+size]...)
	st.in = st.in[:copy(st.in, st.in[5+size:])]
	if !st.closed && !c.closed {
		c.creditStreamLocked(st)
		c.flushNowLocked()
	}
	return msg, nil, true
}
