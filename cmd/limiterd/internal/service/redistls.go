package service

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// redisTLSError is a Redis TLS file that does not load; field is its
// field in the file.
type redisTLSError struct {
	field string
	err   error
}

func (e *redisTLSError) Error() string { return e.err.Error() }

// redisTLSField is the field a newRedisClient error is about.
func redisTLSField(err error) string {
	var te *redisTLSError
	if errors.As(err, &te) {
		return te.field
	}
	return "backends.redis"
}

// clientTLS is the TLS configuration towards Redis, or nil without TLS.
// The server is checked against CAFile (the system's roots without it)
// and, unless SkipHostnameVerification, the name dialled.
func (t RedisTLS) clientTLS() (*tls.Config, error) {
	if !t.Enabled {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		b, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, &redisTLSError{"backends.redis.tls.ca_file", err}
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(b) {
			return nil, &redisTLSError{"backends.redis.tls.ca_file", fmt.Errorf("%s: no PEM certificate", t.CAFile)}
		}
	}
	if t.CertFile != "" {
		kp, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, &redisTLSError{"backends.redis.tls.cert_file", err}
		}
		c.Certificates = []tls.Certificate{kp}
	}
	if t.SkipHostnameVerification {
		// The chain is checked here instead of by crypto/tls, without a
		// name.
		roots := c.RootCAs
		c.InsecureSkipVerify = true
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("redis: the server showed no certificate")
			}
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
			for _, ic := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(ic)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	}
	return c, nil
}
