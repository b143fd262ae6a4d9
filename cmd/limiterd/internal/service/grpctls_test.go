package service

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	ratelimiterv1 "github.com/costwise/batcher/api/ratelimiter/v1"
)

// testCA is a certificate authority made for a test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

var serial int64

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key := newKey(t)
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue makes a certificate for dns names (and 127.0.0.1) signed by ca,
// for a server or a client.
func (ca *testCA) issue(t *testing.T, client bool, dns ...string) tls.Certificate {
	t.Helper()
	key := newKey(t)
	serial++
	usage := x509.ExtKeyUsageServerAuth
	if client {
		usage = x509.ExtKeyUsageClientAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: dns[0]}, DNSNames: dns,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// writePair writes a certificate and its key as PEM files in dir and
// returns their paths.
func writePair(t *testing.T, dir, name string, c tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	kb, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// tlsSetup is a server certificate, a client CA and the clients' files.
type tlsSetup struct {
	dir                         string
	serverCA, clientCA, otherCA *testCA
	serverCert, serverKey       string
	clientCAFile                string
}

func newTLSSetup(t *testing.T) *tlsSetup {
	s := &tlsSetup{dir: t.TempDir(), serverCA: newCA(t, "server ca"), clientCA: newCA(t, "client ca"), otherCA: newCA(t, "other ca")}
	s.serverCert, s.serverKey = writePair(t, s.dir, "server", s.serverCA.issue(t, false, "limiterd.test"))
	s.clientCAFile = writeFile(t, s.dir, "client-ca.pem", string(s.clientCA.pem))
	return s
}

// dialTLS connects to addr trusting the server CA, showing cert when it
// has one.
func (s *tlsSetup) dialTLS(t *testing.T, addr string, cert *tls.Certificate) *grpc.ClientConn {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(s.serverCA.cert)
	tc := &tls.Config{RootCAs: pool, ServerName: "limiterd.test"}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// allowOver calls ratelimiter.v1 Allow and the health service over cc and
// returns the first error.
func allowOver(cc *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := ratelimiterv1.NewRateLimiterClient(cc).Allow(ctx, &ratelimiterv1.AllowRequest{Key: "k"}); err != nil {
		return err
	}
	r, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err == nil && r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return status.Errorf(codes.Internal, "health %v", r.GetStatus())
	}
	return err
}

// TestGRPCTLS checks TLS on the gRPC port of both servers: a client that
// trusts the server's CA is served, a plain-text client is not.
func TestGRPCTLS(t *testing.T) {
	s := newTLSSetup(t)
	for _, server := range []string{GRPCServerLean, GRPCServerGo} {
		t.Run(server, func(t *testing.T) {
			p := start(t, "", "--grpc-server", server, "--grpc-tls-cert", s.serverCert, "--grpc-tls-key", s.serverKey)
			if err := allowOver(s.dialTLS(t, p.grpc, nil)); err != nil {
				t.Fatalf("TLS client: %v", err)
			}
			if err := allowOver(dial(t, p.grpc)); status.Code(err) != codes.Unavailable {
				t.Fatalf("plain-text client: %v, want Unavailable", err)
			}
		})
	}
}

// TestGRPCMutualTLS checks mutual TLS on both servers, configured by
// envoyproxy/ratelimit's variables: a client certificate of the client CA
// naming the SAN is served; none, one naming another SAN, and one of
// another CA are refused.
func TestGRPCMutualTLS(t *testing.T) {
	s := newTLSSetup(t)
	setRatelimitEnv(t)
	t.Setenv("GRPC_SERVER_USE_TLS", "true")
	t.Setenv("GRPC_SERVER_TLS_CERT", s.serverCert)
	t.Setenv("GRPC_SERVER_TLS_KEY", s.serverKey)
	t.Setenv("GRPC_CLIENT_TLS_CACERT", s.clientCAFile)
	t.Setenv("GRPC_CLIENT_TLS_SAN", "envoy.client")
	good := s.clientCA.issue(t, true, "envoy.client")
	wrongSAN := s.clientCA.issue(t, true, "intruder.client")
	otherCA := s.otherCA.issue(t, true, "envoy.client")
	for _, server := range []string{GRPCServerLean, GRPCServerGo} {
		t.Run(server, func(t *testing.T) {
			p := start(t, "", "--grpc-server", server)
			if !strings.Contains(p.stderr.String(), `"grpc_mtls":true`) {
				t.Fatalf("mutual TLS not in the start line: %s", p.stderr.String())
			}
			if err := allowOver(s.dialTLS(t, p.grpc, &good)); err != nil {
				t.Fatalf("client with a good certificate: %v", err)
			}
			for name, cert := range map[string]*tls.Certificate{"no certificate": nil, "wrong SAN": &wrongSAN, "other CA": &otherCA} {
				if err := allowOver(s.dialTLS(t, p.grpc, cert)); status.Code(err) != codes.Unavailable {
					t.Errorf("client with %s: %v, want Unavailable", name, err)
				}
			}
		})
	}
}

// TestGRPCTLSCertificateReload checks that a certificate replaced in its
// files is served to the next connection, without a restart.
func TestGRPCTLSCertificateReload(t *testing.T) {
	s := newTLSSetup(t)
	p := start(t, "", "--grpc-tls-cert", s.serverCert, "--grpc-tls-key", s.serverKey)
	if err := allowOver(s.dialTLS(t, p.grpc, nil)); err != nil {
		t.Fatal(err)
	}
	renewed := newCA(t, "renewed server ca")
	writePair(t, s.dir, "server", renewed.issue(t, false, "limiterd.test"))
	if err := allowOver(s.dialTLS(t, p.grpc, nil)); status.Code(err) != codes.Unavailable {
		t.Fatalf("client trusting only the old CA: %v, want Unavailable", err)
	}
	s.serverCA = renewed
	if err := allowOver(s.dialTLS(t, p.grpc, nil)); err != nil {
		t.Fatalf("client trusting the new CA: %v", err)
	}
}

// TestGRPCTLSRefused checks that settings that do not go together, or
// files that do not load, stop limiterd with one line naming them.
func TestGRPCTLSRefused(t *testing.T) {
	s := newTLSSetup(t)
	addrs := []string{"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--metrics-addr", ""}
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"key without cert", nil, []string{"--grpc-tls-key", s.serverKey}, "grpc_tls.cert_file: missing"},
		{"SAN without CA", nil, []string{"--grpc-tls-cert", s.serverCert, "--grpc-tls-key", s.serverKey, "--grpc-tls-client-san", "x"}, "grpc_tls.client_san"},
		{"unreadable cert", nil, []string{"--grpc-tls-cert", filepath.Join(s.dir, "none.crt"), "--grpc-tls-key", s.serverKey}, "none.crt"},
		{"CA file not PEM", nil, []string{"--grpc-tls-cert", s.serverCert, "--grpc-tls-key", s.serverKey, "--grpc-tls-client-ca", s.serverKey}, "no PEM certificate"},
		{"TLS without files", map[string]string{"GRPC_SERVER_USE_TLS": "true"}, nil, "GRPC_SERVER_TLS_CERT"},
		{"not a bool", map[string]string{"GRPC_SERVER_USE_TLS": "yes please"}, nil, "GRPC_SERVER_USE_TLS: must be true or false"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			code, stderr := runOnce(t, append(addrs, c.args...)...)
			if code != 2 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stderr %q: want 2 and one line with %q", code, stderr, c.want)
			}
		})
	}
}

// TestGRPCHealth checks the grpc.health.v1 service on both servers with
// grpc-go's health client: Check answers SERVING for the server as a
// whole, Watch streams it, and an unknown service is NotFound.
func TestGRPCHealth(t *testing.T) {
	for _, server := range []string{GRPCServerLean, GRPCServerGo} {
		t.Run(server, func(t *testing.T) {
			p := start(t, "", "--grpc-server", server)
			c := healthpb.NewHealthClient(dial(t, p.grpc))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			r, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
			if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("Check: %v %v, want SERVING", r, err)
			}
			if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: "no.such.Service"}); status.Code(err) != codes.NotFound {
				t.Fatalf("Check of an unknown service: %v, want NotFound", err)
			}
			w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("Watch: %v %v, want SERVING", r, err)
			}
		})
	}
}
