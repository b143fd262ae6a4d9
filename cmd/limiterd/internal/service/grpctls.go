package service

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// GRPCTLS configures TLS on the gRPC port. With CertFile and KeyFile set,
// the port speaks only TLS; with ClientCAFile too, every client must show a
// certificate signed by one of its CAs (mutual TLS), and with ClientSAN,
// a certificate naming that DNS name.
type GRPCTLS struct {
	// CertFile is the PEM file of the server's certificate chain
	// (envoyproxy/ratelimit's GRPC_SERVER_TLS_CERT).
	CertFile string `yaml:"cert_file"`
	// KeyFile is the PEM file of its private key (GRPC_SERVER_TLS_KEY).
	KeyFile string `yaml:"key_file"`
	// ClientCAFile is the PEM file of the CAs that sign client
	// certificates (GRPC_CLIENT_TLS_CACERT); set, it requires one.
	ClientCAFile string `yaml:"client_ca_file"`
	// ClientSAN is the DNS name a client certificate must carry
	// (GRPC_CLIENT_TLS_SAN); it needs ClientCAFile.
	ClientSAN string `yaml:"client_san"`
}

// enabled reports whether the gRPC port speaks TLS.
func (t *GRPCTLS) enabled() bool { return t.CertFile != "" || t.KeyFile != "" }

// validate checks that the settings go together; the files are read when
// the service starts.
func (c *Config) validateGRPCTLS() error {
	t := &c.GRPCTLS
	switch {
	case t.CertFile == "" && t.KeyFile != "":
		return c.errField("grpc_tls.cert_file", "missing: key_file needs it")
	case t.CertFile != "" && t.KeyFile == "":
		return c.errField("grpc_tls.key_file", "missing: cert_file needs it")
	case t.ClientCAFile != "" && !t.enabled():
		return c.errField("grpc_tls.client_ca_file", "needs cert_file and key_file: client certificates are checked only over TLS")
	case t.ClientSAN != "" && t.ClientCAFile == "":
		return c.errField("grpc_tls.client_san", "needs client_ca_file: without it no client certificate is asked for")
	}
	return nil
}

// serverTLS builds the gRPC port's TLS configuration, or nil without TLS.
// The certificate is read again when its files change, so that a renewed
// certificate (a Kubernetes Secret's update) is served to new connections
// without a restart.
func (t *GRPCTLS) serverTLS() (*tls.Config, error) {
	if !t.enabled() {
		return nil, nil
	}
	kp := &keyPair{certFile: t.CertFile, keyFile: t.KeyFile}
	if _, err := kp.get(nil); err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: kp.get,
		NextProtos:     []string{"h2"},
	}
	if t.ClientCAFile == "" {
		return cfg, nil
	}
	pool, err := readCAs(t.ClientCAFile)
	if err != nil {
		return nil, err
	}
	cfg.ClientCAs = pool
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	if san := t.ClientSAN; san != "" {
		cfg.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
			// The chains are verified already; the leaf must name san.
			for _, chain := range chains {
				if len(chain) > 0 && chain[0].VerifyHostname(san) == nil {
					return nil
				}
			}
			return fmt.Errorf("limiterd: client certificate does not name %q", san)
		}
	}
	return cfg, nil
}

// readCAs reads a PEM file of CA certificates.
func readCAs(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("limiterd: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("limiterd: CA file %s: no PEM certificate in it", file)
	}
	return pool, nil
}

// keyPair is a certificate read from its files, read again when their
// modification times or sizes change. Safe for concurrent use.
type keyPair struct {
	certFile, keyFile string

	mu    sync.Mutex
	stamp [2]fileStamp
	cert  *tls.Certificate
}

// fileStamp is what tells that a file changed.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(file string) (fileStamp, error) {
	st, err := os.Stat(file)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{st.ModTime(), st.Size()}, nil
}

// get returns the current certificate. A change that does not load (a
// half-written pair) keeps the last good certificate; only the first load
// fails.
func (k *keyPair) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	cs, err1 := stampOf(k.certFile)
	ks, err2 := stampOf(k.keyFile)
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := errors.Join(err1, err2); err != nil {
		if k.cert != nil {
			return k.cert, nil
		}
		return nil, fmt.Errorf("limiterd: TLS certificate: %w", err)
	}
	if k.cert != nil && k.stamp == [2]fileStamp{cs, ks} {
		return k.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		if k.cert != nil {
			return k.cert, nil
		}
		return nil, fmt.Errorf("limiterd: TLS certificate: %w", err)
	}
	k.cert, k.stamp = &cert, [2]fileStamp{cs, ks}
	return k.cert, nil
}
