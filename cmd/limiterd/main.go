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
//	         [--metrics-addr :9091] [--debug-addr 127.0.0.1:6060]
//	         [--rules DIR] [--log-format text|json]
//	         [--grpc-server lean|grpc-go]
//
// limiterd --help lists every flag. The service itself is the package
// cmd/limiterd/internal/service (Run); this command parses the flags, runs
// it until SIGINT or SIGTERM, and exits with its status.
//
// Without a file it starts in memory with a token bucket of 10 tokens
// refilled at 1 token per second per key. A configuration it refuses stops
// it with one line naming the file and the field, exit status 2. SIGINT or
// SIGTERM stops it gracefully: no new calls, in-flight calls finished, at
// most 10 s.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/costwise/batcher/cmd/limiterd/internal/service"
)

// gcPercent is the garbage collector's target when GOGC is not set. A
// decision allocates a few hundred bytes that die at once, so letting the
// heap grow to 5x the live heap before a collection, instead of 2x, cuts
// the collector's share of the CPU. The live heap is a few megabytes on
// Redis; the memory store holds about 100 B of live heap per active key of
// 16 bytes (plus the key's length), and at this target the process's
// resident memory grows by 330 to 440 B per key: a million active keys
// take 330-440 MB (BenchmarkMemoryPerKey in the service package; the
// store holds at most backends.in_memory.max_keys). GOGC in the
// environment overrides it (GOGC=100 is Go's default).
const gcPercent = 400

// The configuration's names, kept here for code that used them in this
// package.
type (
	// Config is limiterd's configuration; see service.Config.
	Config = service.Config
	// ConfigError is a refused configuration; see service.ConfigError.
	ConfigError = service.ConfigError
)

var (
	// LoadConfig reads and validates a file; see service.LoadConfig.
	LoadConfig = service.LoadConfig
	// ParseConfig decodes and validates a file's content; see
	// service.ParseConfig.
	ParseConfig = service.ParseConfig
)

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := service.Main(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}
