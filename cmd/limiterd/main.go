// Command limiterd is a rate limit service for callers that are not Go
// programs. It speaks three APIs:
//
//   - REST: POST /limit (key in X-Client-Key, cost in X-Required-Tokens),
//     GET /health, and POST /json, Envoy's rate limit JSON endpoint;
//   - gRPC ratelimiter.v1.RateLimiter/Allow (api/ratelimiter/v1);
//   - gRPC envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, with
//     envoyproxy/ratelimit's rule files (--rules DIR) and counting, so that
//     Envoy, Istio, Contour, Emissary or Gloo can point at it unchanged.
//
// Usage:
//
//	limiterd [--config FILE] [--http-addr :8080] [--grpc-addr :8081]
//	         [--metrics-addr :9091] [--rules DIR] [--log-format text|json]
//	         [--grpc-server lean|grpc-go]
//
// gRPC is served by default on limiterd's own lean server for unary calls
// over HTTP/2 without TLS (internal/unarygrpc); --grpc-server grpc-go
// serves it on grpc-go's server instead, with the same answers at about
// 1.5 times the CPU per call.
//
// Without a file it starts in memory with a token bucket of 10 tokens
// refilled at 1 token per second per key. A configuration it refuses stops
// it with one line naming the file and the field, exit status 2. SIGINT or
// SIGTERM stops it gracefully: no new calls, in-flight calls finished, at
// most 10 s.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"
)

// gcPercent is the garbage collector's target when GOGC is not set. A
// decision allocates a few hundred bytes that die at once, so letting the
// heap grow to 5x the live heap before a collection, instead of 2x, cuts
// the collector's share of the CPU. The live heap is a few megabytes on
// Redis; a memory store adds about 50 B per key (a million keys: up to
// 250 MB of heap instead of 100 MB). GOGC in the environment overrides it
// (GOGC=100 is Go's default).
const gcPercent = 400

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// options are the command line's settings.
type options struct {
	config, httpAddr, grpcAddr, metricsAddr, rules string
	logFormat, logLevel                            string
	grpcServer                                     string // grpcServerLean or grpcServerGo
	rulesInterval, shutdownTimeout                 time.Duration
	metricsSet                                     bool // --metrics-addr was given
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("limiterd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.config, "config", "", "YAML configuration `file` (default: in memory, token bucket 10 tokens at 1/s)")
	fs.StringVar(&o.httpAddr, "http-addr", ":8080", "REST `address`: POST /limit, GET /health, POST /json")
	fs.StringVar(&o.grpcAddr, "grpc-addr", ":8081", "gRPC `address`: ratelimiter.v1 and Envoy's RateLimitService")
	fs.StringVar(&o.metricsAddr, "metrics-addr", ":9091", "Prometheus /metrics `address`; empty disables")
	fs.StringVar(&o.rules, "rules", "", "`directory` of Envoy rate limit rule files, reloaded when they change")
	fs.StringVar(&o.grpcServer, "grpc-server", grpcServerLean, "gRPC server: lean (limiterd's own, unary calls over h2c) or grpc-go")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.DurationVar(&o.rulesInterval, "rules-interval", time.Second, "how often the rule directory is checked for changes")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "the longest a graceful stop waits for in-flight calls")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("limiterd: unexpected argument %q", fs.Arg(0))
	}
	fs.Visit(func(f *flag.Flag) { o.metricsSet = o.metricsSet || f.Name == "metrics-addr" })
	if o.logFormat != "text" && o.logFormat != "json" {
		return o, fmt.Errorf("limiterd: --log-format must be text or json, not %q", o.logFormat)
	}
	if o.grpcServer != grpcServerLean && o.grpcServer != grpcServerGo {
		return o, fmt.Errorf("limiterd: --grpc-server must be lean or grpc-go, not %q", o.grpcServer)
	}
	if _, err := parseLevel(o.logLevel); err != nil {
		return o, err
	}
	if o.rulesInterval <= 0 || o.shutdownTimeout <= 0 {
		return o, errors.New("limiterd: --rules-interval and --shutdown-timeout must be positive")
	}
	return o, nil
}

// The values of --grpc-server.
const (
	grpcServerLean = "lean"
	grpcServerGo   = "grpc-go"
)

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, fmt.Errorf("limiterd: --log-level must be debug, info, warn or error, not %q", s)
	}
	return l, nil
}

func newLogger(o options, w io.Writer) *slog.Logger {
	level, _ := parseLevel(o.logLevel)
	ho := &slog.HandlerOptions{Level: level}
	if o.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, ho))
	}
	return slog.New(slog.NewTextHandler(w, ho))
}

// run starts the service and blocks until ctx ends or a server fails; it
// returns the exit status: 0 after a graceful stop, 1 when a server fails,
// 2 for bad flags or configuration.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, oneLine(err.Error()))
		}
		return 2
	}
	cfg, err := LoadConfig(o.config)
	if err != nil {
		fmt.Fprintln(stderr, oneLine(err.Error()))
		return 2
	}
	log := newLogger(o, stderr)
	srv, err := newServer(cfg, o, log)
	if err != nil {
		fmt.Fprintln(stderr, oneLine(err.Error()))
		var ce *ConfigError
		if errors.As(err, &ce) || strings.Contains(err.Error(), "envoyrl:") {
			return 2
		}
		return 1
	}
	if err := srv.serve(ctx); err != nil {
		log.Error("stopped", "err", err.Error())
		return 1
	}
	return 0
}
