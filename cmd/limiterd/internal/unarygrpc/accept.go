package unarygrpc

import (
	"errors"
	"log"
	"net"
	"time"
)

// Accept's backoff after an error, as net/http's: 5 ms, doubling up to 1 s.
const (
	minAcceptDelay = 5 * time.Millisecond
	maxAcceptDelay = time.Second
)

// accept returns the listener's next connection. An error other than the
// listener's closing — out of file descriptors (EMFILE, ENFILE), a
// connection reset before it was accepted — is waited out with a backoff
// and logged at most once a second, as net/http does, instead of ending
// Serve: the connections that hold the descriptors end, and accepting
// resumes.
func (s *Server) accept(ln net.Listener) (net.Conn, error) {
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err == nil {
			return nc, nil
		}
		if errors.Is(err, net.ErrClosed) || s.stopping() {
			return nil, err
		}
		delay = min(max(2*delay, minAcceptDelay), maxAcceptDelay)
		s.logAcceptError(err, delay)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-s.quit:
			t.Stop()
			return nil, err
		}
	}
}

// logAcceptError logs an accept error unless one was logged less than a
// second ago.
func (s *Server) logAcceptError(err error, delay time.Duration) {
	now := time.Now().UnixNano()
	last := s.loggedAt.Load()
	if now-last < int64(time.Second) || !s.loggedAt.CompareAndSwap(last, now) {
		return
	}
	l := s.ErrorLog
	if l == nil {
		l = log.Default()
	}
	l.Printf("unarygrpc: accept error: %v; retrying in %v", err, delay)
}

// stopping reports whether GracefulStop or Stop was called.
func (s *Server) stopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}
