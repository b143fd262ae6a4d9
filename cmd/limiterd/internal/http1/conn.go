package http1

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"sync/atomic"
	"time"
)

// conn is a connection served on the fast path.
type conn struct {
	srv *Server
	rwc net.Conn
	lim limits

	// deadline is when the sweeper closes the connection, on the
	// server's clock (Server.now); 0 means never.
	deadline atomic.Int64
	// idle: waiting for a new request with nothing buffered; Shutdown
	// closes idle connections.
	idle atomic.Bool

	buf       []byte // buf[r:w] is read and not yet served
	r, w      int
	bw        *bufio.Writer
	afterPost bool
	served    bool // a request was served

	parsed request
	req    http.Request // reused: set from tmpl for each request
	tmpl   http.Request // holds the connection's context
	url    url.URL
	header http.Header
	values []string
	body   body
	resp   response
	cancel context.CancelFunc
}

func (s *Server) newConn(rwc net.Conn) *conn {
	c := &conn{srv: s, rwc: rwc, lim: s.limits(), buf: make([]byte, 4<<10), header: make(http.Header)}
	c.bw = bufio.NewWriterSize(rwc, 4<<10)
	ctx, cancel := context.WithCancel(context.Background())
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, rwc.LocalAddr())
	c.cancel = cancel
	c.tmpl = *(&http.Request{
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, RemoteAddr: rwc.RemoteAddr().String(),
	}).WithContext(ctx)
	c.resp.c = c
	c.resp.header = make(http.Header)
	return c
}

// timeoutAt is the deadline d from now, or 0 (none) when d is 0.
func (s *Server) timeoutAt(d time.Duration) int64 {
	if d > 0 {
		return s.now() + int64(d)
	}
	return 0
}

// headerEnd ends a request's header on the fast path.
var headerEnd = []byte("\r\n\r\n")

// headerDeadline is when the header of a request begun at start must be
// in: ReadHeaderTimeout after it, or ReadTimeout when that is 0, as in
// net/http; 0 for none.
func (s *Server) headerDeadline(start int64) int64 {
	return deadlineFrom(start, cmp.Or(s.ReadHeaderTimeout, s.ReadTimeout))
}

// requestDeadline is when the whole of a request begun at start, body
// included, must be in: ReadTimeout after it, or ReadHeaderTimeout when
// that is 0 (where net/http sets none: the fast path keeps its small
// bodies bounded); 0 for none.
func (s *Server) requestDeadline(start int64) int64 {
	return deadlineFrom(start, cmp.Or(s.ReadTimeout, s.ReadHeaderTimeout))
}

func deadlineFrom(start int64, d time.Duration) int64 {
	if d > 0 {
		return start + int64(d)
	}
	return 0
}

func (c *conn) serve() {
	handedOff := false
	defer func() {
		if v := recover(); v != nil && v != http.ErrAbortHandler {
			const size = 64 << 10
			buf := make([]byte, size)
			buf = buf[:runtime.Stack(buf, false)]
			c.srv.logf("http1: panic serving %v: %v\n%s", c.rwc.RemoteAddr(), v, buf)
		}
		c.cancel()
		c.srv.forget(c)
		if !handedOff {
			// The writer holds only whole answers (a handler's answer is
			// kept apart until it returns): those to the requests before
			// a panic or a stop are sent.
			_ = c.flush()
			c.rwc.Close()
		}
	}()
	for {
		res, err := c.next()
		if err != nil {
			return
		}
		if res != ready {
			handedOff = true
			c.handOff()
			return
		}
		if !c.serveOne() {
			return
		}
	}
}

// next reads until the buffer holds a whole request for the fast path or
// one to hand off.
func (c *conn) next() (parseResult, error) {
	s := c.srv
	if c.r == c.w {
		c.r, c.w = 0, 0
		// Answers are sent before the connection counts as idle, which
		// Shutdown may close.
		if err := c.flush(); err != nil {
			return 0, err
		}
		if s.closing.Load() {
			return 0, io.EOF
		}
		// A new connection is left its header's time to send its first
		// request before Shutdown closes it, as net/http does.
		c.idle.Store(c.served)
		if c.served {
			c.deadline.Store(s.timeoutAt(s.IdleTimeout))
		} else {
			c.deadline.Store(s.timeoutAt(s.ReadHeaderTimeout))
		}
		if err := c.fill(); err != nil {
			return 0, err
		}
		c.idle.Store(false)
	}
	// The request's deadlines run from its first byte, as in net/http: the
	// header's, then, once the header is in, the whole request's.
	start := s.now()
	c.deadline.Store(s.headerDeadline(start))
	inHeader, scanned := true, 0 // scanned: bytes of c.buf[c.r:] searched for the header's end
	for {
		res := parse(c.buf[c.r:c.w], c.srv.routes, c.lim, c.afterPost, &c.parsed)
		if res == handOff && c.served && c.w-c.r < 4 {
			// After a first request net/http waits for 4 bytes
			// before it reads the next: so does the hand-off.
			res = needMore
		}
		if res != needMore {
			return res, nil
		}
		if inHeader {
			from := c.r + max(scanned-3, 0)
			if bytes.Contains(c.buf[from:c.w], headerEnd) {
				inHeader = false
				c.deadline.Store(s.requestDeadline(start))
			}
			scanned = c.w - c.r
		}
		if err := c.fill(); err != nil {
			// The client ended a request half-way: net/http answers
			// that, unless fewer than 4 bytes came after an earlier
			// request (it waits for 4 before reading the next one).
			if err == io.EOF && (!c.served || c.w-c.r >= 4) {
				return handOff, nil
			}
			return 0, err
		}
	}
}

// fill reads more of the connection into the buffer, first writing out
// the answers waiting in the writer, and making room: moving what is left
// to the front, or growing the buffer up to a header and body's limits.
func (c *conn) fill() error {
	if err := c.flush(); err != nil {
		return err
	}
	if c.w == len(c.buf) {
		if c.r > 0 {
			c.w = copy(c.buf, c.buf[c.r:c.w])
			c.r = 0
		} else {
			// parse hands off a header over its limit and waits only
			// for a body within its own, so the buffer stops growing
			// at about their sum.
			nb := make([]byte, min(2*len(c.buf), c.lim.maxHeader+c.lim.maxBody+4))
			copy(nb, c.buf[:c.w])
			c.buf = nb
		}
	}
	n, err := c.rwc.Read(c.buf[c.w:])
	c.w += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// flush writes the answers in the writer, under the write deadline.
func (c *conn) flush() error {
	if c.bw.Buffered() == 0 {
		return nil
	}
	s := c.srv
	old := c.deadline.Load()
	if s.WriteTimeout > 0 {
		c.deadline.Store(s.timeoutAt(s.WriteTimeout))
	}
	err := c.bw.Flush()
	c.deadline.Store(old)
	return err
}

// handOff gives the connection, with what is buffered, to net/http, after
// writing the answers to the requests before it.
func (c *conn) handOff() {
	if c.flush() != nil {
		c.rwc.Close()
		return
	}
	c.deadline.Store(0)
	c.srv.forget(c)
	// net/http would have skipped the same stray CR/LF after a POST.
	pending := append([]byte(nil), c.buf[c.r+c.parsed.skip:c.w]...)
	c.srv.handoff.give(&replayConn{Conn: c.rwc, pending: pending})
}

// serveOne runs the handler of the parsed request and buffers its answer;
// it reports whether the connection stays open.
func (c *conn) serveOne() bool {
	p := &c.parsed
	c.deadline.Store(0)
	start := c.r
	c.r += p.hdrLen + p.bodyLen
	hdr := c.buf[start : start+p.hdrLen]
	c.afterPost = p.route.Method == http.MethodPost
	c.served = true

	// One string holds the header's bytes; the values are cut from it.
	text := string(hdr)
	clear(c.header)
	c.values = c.values[:0]
	for _, f := range p.fields {
		c.values = append(c.values, text[offset(hdr, f[1]):][:len(f[1])])
	}
	for i, f := range p.fields {
		name := canonicalName(f[0])
		if vs, ok := c.header[name]; ok {
			c.header[name] = append(vs, c.values[i])
		} else {
			c.header[name] = c.values[i : i+1 : i+1]
		}
	}

	rt := p.route
	c.url = url.URL{Path: rt.Path}
	c.req = c.tmpl
	c.req.Method = rt.Method
	c.req.URL = &c.url
	c.req.RequestURI = rt.Path
	c.req.Header = c.header
	c.req.Host = text[offset(hdr, p.host):][:len(p.host)]
	c.req.ContentLength = int64(p.bodyLen)
	c.req.Close = p.close
	c.req.Body = http.NoBody
	if p.bodyLen > 0 {
		c.body = body{b: c.buf[start+p.hdrLen : c.r]}
		c.req.Body = &c.body
	}
	c.resp.reset()
	rt.Handler.ServeHTTP(&c.resp, &c.req)
	c.body = body{}
	closeAfter := p.close || c.srv.closing.Load() || c.resp.wantsClose()
	// The writer sends what fills it: under the write deadline too.
	c.deadline.Store(c.srv.timeoutAt(c.srv.WriteTimeout))
	c.resp.finish(c.bw, closeAfter)
	return !closeAfter
}

// offset is the position of sub in b, which holds it.
func offset(b, sub []byte) int {
	if len(sub) == 0 {
		return 0
	}
	return cap(b) - cap(sub)
}

// body is a request body held in the connection's buffer.
type body struct {
	b      []byte
	closed bool
}

// Read implements io.Reader.
func (b *body) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if len(b.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.b)
	b.b = b.b[n:]
	return n, nil
}

// Close implements io.Closer.
func (b *body) Close() error {
	b.closed = true
	return nil
}
