package unarygrpc

import (
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestWriteTimeoutEndsStuckConnection checks that a peer that sends the
// preface but never reads does not hold the connection forever: the
// server's first write (its SETTINGS, over a pipe that only moves bytes
// when read) gives up after WriteTimeout and the connection ends. Without
// a write deadline serve would never return.
func TestWriteTimeoutEndsStuckConnection(t *testing.T) {
	srv := &Server{HandshakeTimeout: time.Minute, WriteTimeout: 50 * time.Millisecond}
	srv.init()
	client, server := net.Pipe()
	defer client.Close()
	c := newConn(srv, server)
	served := make(chan struct{})
	go func() { c.serve(); close(served) }()
	if _, err := client.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatalf("write the preface: %v", err)
	}
	select {
	case <-served:
	case <-time.After(30 * time.Second):
		t.Fatal("the connection to a peer that never reads was still served 30 s later")
	}
	if c.werr == nil {
		t.Fatal("the connection ended without a write error")
	}
}
