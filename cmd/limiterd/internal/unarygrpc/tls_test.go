package unarygrpc

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	ratelimiterv1 "github.com/costwise/batcher/api/ratelimiter/v1"
)

// selfSigned makes a server certificate for 127.0.0.1 and a pool that
// trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "unarygrpc.test"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// TestTLS checks calls over TLS from grpc-go's client, and that a
// plain-text client is not served by a TLS server.
func TestTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	addr := serveTest(t, &Server{TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}}, &limiter{})
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	legitimateCall(t, cc)
	c := ratelimiterv1.NewRateLimiterClient(cc)
	r, err := c.Allow(ctxT(t), &ratelimiterv1.AllowRequest{Key: "abc"})
	if err != nil || !r.Allowed || r.RetryAfter.AsDuration() != 3 {
		t.Fatalf("over TLS: %v %v", r, err)
	}
	plain := ratelimiterv1.NewRateLimiterClient(dial(t, addr, grpc.WithTransportCredentials(insecure.NewCredentials())))
	if _, err := plain.Allow(ctxT(t), &ratelimiterv1.AllowRequest{Key: "abc"}); err == nil {
		t.Fatalf("a plain-text call to a TLS server: %v", status.Convert(err))
	}
}

// TestTLSHandshakeTimeout checks that a connection that never starts its
// TLS handshake, and one that completes it but never sends the preface,
// are closed after HandshakeTimeout.
func TestTLSHandshakeTimeout(t *testing.T) {
	cert, pool := selfSigned(t)
	addr := serveTest(t, &Server{
		HandshakeTimeout: 200 * time.Millisecond,
		TLSConfig:        &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}},
	}, &limiter{})
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	shaken, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer shaken.Close()
	if p := shaken.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Errorf("ALPN protocol %q, want h2", p)
	}
	for name, nc := range map[string]net.Conn{"no handshake": silent, "no preface": shaken} {
		_ = nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := nc.Read(make([]byte, 1)); err == nil {
			t.Errorf("%s: got bytes", name)
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("%s: still open after 20 s", name)
		}
	}
}

// HandshakeTimeout bounds the whole handshake, TLS and HTTP/2 preface
// together, from the connection's start, as grpc-go does: a client that
// takes most of it before its TLS handshake and then sends no preface is
// closed at the timeout, not a whole timeout after the TLS handshake.
func TestTLSHandshakeTimeoutIsTotal(t *testing.T) {
	cert, pool := selfSigned(t)
	const timeout = 600 * time.Millisecond
	addr := serveTest(t, &Server{
		HandshakeTimeout: timeout,
		TLSConfig:        &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}},
	}, &limiter{})
	start := time.Now()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	time.Sleep(timeout * 2 / 3) // 400 ms of the 600 before the TLS handshake
	tc := tls.Client(raw, &tls.Config{RootCAs: pool, NextProtos: []string{"h2"}, ServerName: "127.0.0.1"})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	_ = tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := tc.Read(make([]byte, 1)); err == nil {
		t.Fatal("got bytes without a preface")
	}
	if d := time.Since(start); d > timeout+350*time.Millisecond { // without the fix: about 1 s
		t.Fatalf("closed %v after the connection began, want at the handshake timeout (%v) from its start", d, timeout)
	}
}
