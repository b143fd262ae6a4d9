// Package http1 serves a few routes of an HTTP service over HTTP/1.1
// keep-alive connections with less work per request than net/http, and
// hands every other request to net/http, on the same connection.
//
// A connection has one goroutine, which reads requests into a buffer kept
// for the connection's life and writes the answers through a buffered
// writer, one write for all the answers to the requests a read brought
// (pipelined requests included). net/http costs more per request: it sets
// read and write deadlines for each one (timer updates in the runtime),
// starts a background read while the handler runs and stops it after,
// allocates a request, a response, a header map and a context each time.
// Here the deadlines are enforced by one goroutine per server that looks
// at the connections a few times a second, and the request, its header
// map and the response are reused.
//
// Only requests in the plain form are served here: a method and path that
// match a [Route] exactly, HTTP/1.1, a Host header, a body given by
// Content-Length no larger than MaxBodyBytes, and a header of well-formed
// CRLF-ended lines no larger than MaxHeaderBytes. From the first request
// that is not (another path, a query string, HTTP/1.0, chunked bodies,
// Expect: 100-continue, Upgrade, a malformed line, a larger body or
// header), the connection, with everything read from it so far, is handed
// to a net/http server running Handler, which serves or refuses it as it
// would have all along.
//
// A route's handler gets an [http.ResponseWriter] that keeps the whole
// answer in memory and writes it with a Content-Length when the handler
// returns; it does not implement [http.Flusher] or [http.Hijacker], and
// trailers are not sent. The [http.Request] it gets is reused for the
// connection's next request, so it must not be kept after the handler
// returns (net/http asks the same of the ResponseWriter). Its context is
// the connection's, ended when the connection closes, not when the client
// goes away during the handler (net/http notices that with a read it keeps
// pending during the handler, one of the costs saved here). Routes are
// meant for handlers that answer small bodies at once, as rate limit
// decisions do.
package http1

import (
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Route is a method and path served on the fast path.
type Route struct {
	// Method is the request method, such as "POST"; HEAD is not served.
	Method string
	// Path is the exact request target: a path without a query.
	Path string
	// Handler answers the route's requests.
	Handler http.Handler
}

// Server serves Routes itself and everything else through Handler with
// net/http. Set its fields before Serve; it is safe for concurrent use
// after.
type Server struct {
	// Handler serves every request that is not served on the fast path:
	// usually the whole service, routes included.
	Handler http.Handler
	// Routes are served on the fast path.
	Routes []Route
	// ReadHeaderTimeout bounds the time from a request's first byte until
	// its header is read, on the fast path and in net/http, where it is
	// the ReadHeaderTimeout of handed-off connections. Zero means
	// ReadTimeout.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the time from a request's first byte until the
	// whole request, body included, is read, on the fast path and in
	// net/http. Zero means none in net/http and ReadHeaderTimeout on the
	// fast path, whose bodies stay bounded.
	ReadTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a keep-alive
	// connection, on the fast path and in net/http. Zero means none.
	IdleTimeout time.Duration
	// WriteTimeout bounds each write of answers on the fast path, so that
	// a client that stops reading cannot hold a connection, and is
	// net/http's WriteTimeout on handed-off connections. Zero means none.
	WriteTimeout time.Duration
	// MaxHeaderBytes bounds the request line and header served on the fast
	// path (default 8 KiB); larger ones are handed off to net/http, and
	// answered 431 there past the same limit when it is set (HeaderLimit;
	// net/http's default, 1 MiB, when it is not).
	MaxHeaderBytes int
	// MaxBodyBytes bounds the body served on the fast path (default
	// 64 KiB); larger ones are handed off.
	MaxBodyBytes int
	// ErrorLog receives handler panics and accept errors; nil means the
	// log package's standard logger.
	ErrorLog *log.Logger

	startOnce sync.Once
	routes    []Route // Routes without HEAD
	inner     *http.Server
	handoff   *handoffListener
	epoch     time.Time

	mu        sync.Mutex
	conns     map[*conn]struct{}
	listeners map[net.Listener]struct{}
	janitor   chan struct{} // closed to stop the janitor
	closing   atomic.Bool
	loggedAt  atomic.Int64   // s.now() when an accept error was last logged
	wg        sync.WaitGroup // the inner server and the janitor
}

// Default limits of the fast path.
const (
	defaultMaxHeaderBytes = 8 << 10
	defaultMaxBodyBytes   = 64 << 10
)

func (s *Server) start() {
	s.startOnce.Do(func() {
		s.epoch = time.Now()
		for _, r := range s.Routes {
			if r.Method != http.MethodHead && r.Handler != nil {
				s.routes = append(s.routes, r)
			}
		}
		s.conns = make(map[*conn]struct{})
		s.listeners = make(map[net.Listener]struct{})
		s.janitor = make(chan struct{})
		s.handoff = &handoffListener{conns: make(chan net.Conn), done: make(chan struct{})}
		s.inner = &http.Server{
			Handler:           HeaderLimit(s.Handler, s.MaxHeaderBytes),
			ReadHeaderTimeout: s.ReadHeaderTimeout,
			ReadTimeout:       s.ReadTimeout,
			WriteTimeout:      s.WriteTimeout,
			IdleTimeout:       s.IdleTimeout,
			MaxHeaderBytes:    s.MaxHeaderBytes,
			ErrorLog:          s.ErrorLog,
		}
		s.wg.Add(2)
		go func() { defer s.wg.Done(); _ = s.inner.Serve(s.handoff) }()
		go func() { defer s.wg.Done(); s.sweep() }()
	})
}

func (s *Server) limits() limits {
	l := limits{maxHeader: s.MaxHeaderBytes, maxBody: s.MaxBodyBytes}
	if l.maxHeader <= 0 {
		l.maxHeader = defaultMaxHeaderBytes
	}
	if l.maxBody <= 0 {
		l.maxBody = defaultMaxBodyBytes
	}
	return l
}

// now is the time since the server started, in nanoseconds: the clock of
// the connections' deadlines.
func (s *Server) now() int64 { return int64(time.Since(s.epoch)) }

func (s *Server) logf(format string, args ...any) {
	if s.ErrorLog != nil {
		s.ErrorLog.Printf(format, args...)
	} else {
		log.Printf(format, args...)
	}
}

// logAcceptError logs an accept error unless one was logged less than a
// second ago: a server out of file descriptors fails every Accept.
func (s *Server) logAcceptError(err error, backoff time.Duration) {
	now := s.now()
	last := s.loggedAt.Load()
	if (last != 0 && now-last < int64(time.Second)) || !s.loggedAt.CompareAndSwap(last, now) {
		return
	}
	s.logf("http1: accept error: %v; retrying in %v", err, backoff)
}

// Serve accepts connections on ln and serves them until Shutdown or Close,
// after which it returns http.ErrServerClosed. It closes ln when it
// returns.
func (s *Server) Serve(ln net.Listener) error {
	s.start()
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		ln.Close()
		return http.ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
		ln.Close()
	}()
	if s.handoff.addr.Load() == nil {
		a := ln.Addr()
		s.handoff.addr.Store(&a)
	}
	var backoff time.Duration
	for {
		rwc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return http.ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of file descriptors, a connection reset before it was
			// accepted: wait a little and go on, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.logAcceptError(err, backoff)
			if !s.sleep(backoff) {
				return http.ErrServerClosed
			}
			continue
		}
		backoff = 0
		c := s.newConn(rwc)
		s.mu.Lock()
		if s.closing.Load() {
			s.mu.Unlock()
			rwc.Close()
			return http.ErrServerClosed
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		go c.serve()
	}
}

// sleep waits d, or until the server closes; it reports whether it waited
// the whole d.
func (s *Server) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.handoff.done:
		return false
	}
}

// forget removes c from the connections Shutdown waits for.
func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// sweep closes the connections whose deadline has passed, a few times per
// shortest timeout, until the server closes.
func (s *Server) sweep() {
	every := time.Second
	for _, d := range []time.Duration{s.ReadHeaderTimeout, s.ReadTimeout, s.IdleTimeout, s.WriteTimeout} {
		if d > 0 {
			every = min(every, d/8)
		}
	}
	every = max(every, 5*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.janitor:
			return
		case <-t.C:
		}
		now := s.now()
		s.mu.Lock()
		for c := range s.conns {
			if d := c.deadline.Load(); d != 0 && d < now {
				c.rwc.Close()
			}
		}
		s.mu.Unlock()
	}
}

// shutdownPoll is how often Shutdown looks for connections gone idle.
const shutdownPoll = 20 * time.Millisecond

// Shutdown stops the server gracefully: it closes the listeners, then
// closes each connection once it has answered the request it is serving
// (requests already read are answered, with Connection: close), and
// waits for them, and for the connections net/http serves, until ctx ends.
// It then returns ctx's error, leaving the remaining connections open;
// call Close to cut them.
func (s *Server) Shutdown(ctx context.Context) error {
	s.start()
	s.beginClose()
	innerDone := make(chan error, 1)
	go func() { innerDone <- s.inner.Shutdown(ctx) }()
	t := time.NewTicker(shutdownPoll)
	defer t.Stop()
	for {
		s.mu.Lock()
		for c := range s.conns {
			if c.idle.Load() {
				c.rwc.Close()
			}
		}
		n := len(s.conns)
		s.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	err := <-innerDone
	s.stopJanitor()
	return err
}

// Close closes the listeners and every connection at once.
func (s *Server) Close() error {
	s.start()
	s.beginClose()
	s.mu.Lock()
	for c := range s.conns {
		c.rwc.Close()
	}
	s.mu.Unlock()
	err := s.inner.Close()
	s.stopJanitor()
	return err
}

func (s *Server) beginClose() {
	s.mu.Lock()
	s.closing.Store(true)
	for ln := range s.listeners {
		ln.Close()
	}
	s.mu.Unlock()
	s.handoff.close()
}

func (s *Server) stopJanitor() {
	s.mu.Lock()
	select {
	case <-s.janitor:
	default:
		close(s.janitor)
	}
	s.mu.Unlock()
}

// handoffListener passes connections to the net/http server.
type handoffListener struct {
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
	addr      atomic.Pointer[net.Addr]
}

// give hands c to the net/http server, or closes it when the server is
// closing.
func (l *handoffListener) give(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		c.Close()
	}
}

// Accept implements net.Listener.
func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (l *handoffListener) Close() error {
	l.close()
	return nil
}

func (l *handoffListener) close() { l.closeOnce.Do(func() { close(l.done) }) }

// Addr implements net.Listener: the first listener's address.
func (l *handoffListener) Addr() net.Addr {
	if a := l.addr.Load(); a != nil {
		return *a
	}
	return &net.TCPAddr{}
}

// replayConn is a handed-off connection: what was read from it but not
// served is read again first.
type replayConn struct {
	net.Conn
	pending []byte
}

// Read implements net.Conn.
func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite closes the connection's sending side, as net/http does
// before closing a connection whose request it did not read to the end, so
// that its last answer is not lost to a reset.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
