package service

import (
	"flag"
	"strconv"
	"time"
)

// grpcFlags are the flags of TLS on the gRPC port and of rules from xDS.
type grpcFlags struct {
	tls       GRPCTLS
	xdsServer string
}

func addGRPCFlags(fs *flag.FlagSet, g *grpcFlags) {
	fs.StringVar(&g.tls.CertFile, "grpc-tls-cert", "", "PEM `file` of the gRPC port's certificate chain; with --grpc-tls-key, the port speaks TLS only")
	fs.StringVar(&g.tls.KeyFile, "grpc-tls-key", "", "PEM `file` of the gRPC port's private key")
	fs.StringVar(&g.tls.ClientCAFile, "grpc-tls-client-ca", "", "PEM `file` of the CAs of client certificates; set, clients must show one (mutual TLS)")
	fs.StringVar(&g.tls.ClientSAN, "grpc-tls-client-san", "", "DNS `name` a client certificate must carry")
	fs.StringVar(&g.xdsServer, "xds-server", "", "xDS management server `target` (host:port) to take the Envoy rules from, instead of --rules")
}

// envSource names the environment in the errors of its variables.
const envSource = "environment"

// applyGRPCFlags puts the TLS and xDS flags given over cfg.
func applyGRPCFlags(cfg *Config, v *flagValues) {
	g := &v.grpc
	setIf(&cfg.GRPCTLS.CertFile, g.tls.CertFile, v.given["grpc-tls-cert"])
	setIf(&cfg.GRPCTLS.KeyFile, g.tls.KeyFile, v.given["grpc-tls-key"])
	setIf(&cfg.GRPCTLS.ClientCAFile, g.tls.ClientCAFile, v.given["grpc-tls-client-ca"])
	setIf(&cfg.GRPCTLS.ClientSAN, g.tls.ClientSAN, v.given["grpc-tls-client-san"])
	setIf(&cfg.Envoy.XDS.ServerURL, g.xdsServer, v.given["xds-server"])
}

func setIf(dst *string, v string, given bool) {
	if given {
		*dst = v
	}
}

// xds reads the xDS client's variables, with envoyproxy/ratelimit's
// defaults.
func (e *envReader) xds() XDS {
	d := defaultXDS()
	x := XDS{
		ServerURL:         e.str("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000"),
		NodeID:            e.str("CONFIG_GRPC_XDS_NODE_ID", d.NodeID),
		NodeMetadata:      e.str("CONFIG_GRPC_XDS_NODE_METADATA", ""),
		Headers:           e.str("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", ""),
		UseTLS:            e.bool("CONFIG_GRPC_XDS_SERVER_USE_TLS", false),
		BackoffInitial:    e.duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", d.BackoffInitial),
		BackoffMax:        e.duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL", d.BackoffMax),
		BackoffFactor:     e.float("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", d.BackoffFactor),
		MaxMsgSize:        int64(e.int("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", 0)),
		StartWithoutRules: e.bool("FORCE_START_WITHOUT_INITIAL_CONFIG", false),
	}
	jitter := e.bool("XDS_CLIENT_BACKOFF_JITTER", true)
	x.BackoffJitter = &jitter
	if x.UseTLS {
		x.CAFile = e.str("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "")
		x.CertFile = e.str("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "")
		x.KeyFile = e.str("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "")
		x.ServerSAN = e.str("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "")
	}
	return x
}

// envReader reads typed variables, keeping the first error, which names
// the variable.
type envReader struct {
	lookup func(string) (string, bool)
	err    error
}

func (e *envReader) fail(name, reason string) {
	if e.err == nil {
		e.err = &ConfigError{File: envSource, Field: name, Reason: reason}
	}
}

// set reports whether name is set to something other than "".
func (e *envReader) set(name string) bool {
	v, ok := e.lookup(name)
	return ok && v != ""
}

func (e *envReader) str(name, def string) string {
	if v, ok := e.lookup(name); ok && v != "" {
		return v
	}
	return def
}

func (e *envReader) bool(name string, def bool) bool {
	s := e.str(name, "")
	if s == "" {
		return def
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		e.fail(name, "must be true or false, not "+strconv.Quote(s))
	}
	return b
}

func (e *envReader) duration(name string, def time.Duration) time.Duration {
	s := e.str(name, "")
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		e.fail(name, "must be a duration such as 10s, not "+strconv.Quote(s))
	}
	return d
}

func (e *envReader) float(name string, def float64) float64 {
	s := e.str(name, "")
	if s == "" {
		return def
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		e.fail(name, "must be a number, not "+strconv.Quote(s))
	}
	return f
}

func (e *envReader) int(name string, def int) int {
	s := e.str(name, "")
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		e.fail(name, "must be an integer, not "+strconv.Quote(s))
	}
	return n
}
