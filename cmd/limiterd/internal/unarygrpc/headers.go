package unarygrpc

import (
	"context"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// headerBlock is what the reader collects from a block of HEADERS and
// CONTINUATION frames.
type headerBlock struct {
	streamID                 uint32
	endStream                bool
	raw                      int
	size                     uint32
	tooLarge, malformed      bool
	regular                  bool // a regular field was seen: no pseudo-header may follow
	method, path             string
	contentType, timeout     string
	encoding, contentLength  string
	hasMethod, hasPath, isCT bool
	hasScheme, hasAuthority  bool
	hasContentLength, pseudo bool
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
		c.connError(http2.ErrCodeEnhanceYourCalm, "")
		return errGoAway
	}
	if _, err := c.hdec.Write(frag); err != nil {
		c.connError(http2.ErrCodeCompression, "")
		return errGoAway
	}
	if !end {
		return nil
	}
	if err := c.hdec.Close(); err != nil {
		c.connError(http2.ErrCodeCompression, "")
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
		c.onPseudo(f)
		return
	}
	h.regular = true
	switch f.Name {
	case "content-type":
		h.contentType, h.isCT = f.Value, true
	case "content-length":
		h.malformed = h.malformed || h.hasContentLength
		h.contentLength, h.hasContentLength = f.Value, true
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

// onPseudo records a pseudo-header: each may appear once, before every
// regular field (RFC 9113 8.3).
func (c *conn) onPseudo(f hpack.HeaderField) {
	h := &c.hb
	h.pseudo = true
	if h.regular {
		h.malformed = true
		return
	}
	var seen *bool
	switch f.Name {
	case ":method":
		seen, h.method = &h.hasMethod, f.Value
	case ":path":
		seen, h.path = &h.hasPath, f.Value
	case ":scheme":
		seen = &h.hasScheme
	case ":authority":
		seen = &h.hasAuthority
	default:
		h.malformed = true
		return
	}
	h.malformed = h.malformed || *seen
	*seen = true
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
		// Trailers from the client end its request; they carry no
		// pseudo-header (RFC 9113 8.1).
		if !h.endStream || h.pseudo || h.malformed {
			c.resetStream(id, http2.ErrCodeProtocol)
			return nil
		}
		c.endRequest(st)
		return nil
	}
	if id%2 == 0 {
		c.connError(http2.ErrCodeProtocol, "")
		return errGoAway
	}
	c.mu.Lock()
	if id <= c.maxID {
		st, open := c.streams[id]
		gone, _ := c.gone.find(id)
		discard := open && st.early && !st.remoteDone
		if discard && h.endStream {
			st.remoteDone = true
		}
		c.mu.Unlock()
		switch {
		case discard && h.endStream:
			// The trailers of a request answered early.
			return nil
		case open:
			// HEADERS on a half-closed stream.
			c.resetStream(id, http2.ErrCodeStreamClosed)
			return nil
		case gone:
			c.connError(http2.ErrCodeStreamClosed, "")
		default:
			// An identifier below one already used: RFC 9113 5.1.1.
			c.connError(http2.ErrCodeProtocol, "")
		}
		return errGoAway
	}
	c.maxID = id
	refuse := c.goingAway || uint32(c.calls.Load()) >= c.srv.MaxConcurrentStreams
	c.mu.Unlock()
	if refuse {
		c.resetStream(id, http2.ErrCodeRefusedStream)
		return nil
	}
	cl, clOK := parseContentLength(h)
	if h.malformed || !h.hasMethod || !h.hasPath || !h.hasScheme || h.path == "" || !clOK || (h.endStream && cl > 0) {
		c.resetStream(id, http2.ErrCodeProtocol)
		return nil
	}
	c.sweepRecv()
	c.openStream(c.newStream(h, cl))
	return nil
}

// parseContentLength reads the block's content-length: -1 when it has
// none, false when its value is not a number.
func parseContentLength(h *headerBlock) (int64, bool) {
	if !h.hasContentLength {
		return -1, true
	}
	n, err := strconv.ParseInt(h.contentLength, 10, 64)
	return n, err == nil && n >= 0
}

// newStream makes the stream of a well-formed request, with the failure
// it is to be answered with instead of a call, if any. As grpc-go, a
// request that is not gRPC gets an HTTP answer: 415 without a gRPC
// content-type, 405 for a method other than POST.
func (c *conn) newStream(h *headerBlock, contentLength int64) *stream {
	st := &stream{c: c, id: h.streamID, path: h.path, recvWindow: streamWindow, contentLength: contentLength, head: h.method == "HEAD"}
	switch {
	case h.tooLarge:
		st.failure = status.Newf(codes.ResourceExhausted, "header list size exceeds the limit of %d bytes", c.srv.MaxHeaderListSize)
	case !h.isCT || !isGRPCContentType(h.contentType):
		st.httpStatus = 415
		st.failure = status.Newf(codes.InvalidArgument, "invalid gRPC request content-type %q", h.contentType)
	case h.method != "POST":
		st.httpStatus = 405
		st.failure = status.Newf(codes.Internal, "Received a HEADERS frame with :method %q which should be POST", h.method)
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
	st.remoteDone = h.endStream
	// A gRPC call refused at its headers is answered at once: a client
	// that streams would otherwise wait for an answer that comes only
	// when it ends its request. A request that is not gRPC is answered
	// when it ends, as an HTTP server would.
	st.early = st.failure != nil && st.httpStatus == 0
	return st
}

// openStream publishes a new stream and starts what it needs: a call
// refused at its headers is answered at once (its request, if any, is
// discarded), a streaming call starts at once, a unary call waits for its
// request.
func (c *conn) openStream(st *stream) {
	streaming := st.failure == nil && st.method.stream != nil
	if streaming {
		st.notify = make(chan struct{}, 1)
		st.dispatched = true
	}
	c.calls.Add(1)
	c.mu.Lock()
	st.sendWindow = c.peerWindow
	c.streams[st.id] = st
	c.mu.Unlock()
	switch {
	case streaming:
		if !st.remoteDone {
			c.recv[st.id] = st
		}
		go c.runStream(st)
	case st.early:
		st.dispatched = true
		c.srv.dispatch(st)
	case st.remoteDone:
		c.endRequest(st)
	default:
		c.recv[st.id] = st
	}
}

// sweepRecv forgets the streaming calls that ended while their requests
// were still open, once there are as many of them as calls may be in
// flight, so that what the reader keeps stays bounded.
func (c *conn) sweepRecv() {
	if uint32(len(c.recv)) < c.srv.MaxConcurrentStreams {
		return
	}
	c.mu.Lock()
	for id, st := range c.recv {
		if st.closed {
			delete(c.recv, id)
		}
	}
	c.mu.Unlock()
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
