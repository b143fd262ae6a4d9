package service

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/envoyrl"
)

// Command is what the command line sets beside the file: where to listen,
// how to log, how to stop. It is not read from the file.
type Command struct {
	// HTTPAddr is the REST API's address. Default ":8080".
	HTTPAddr string
	// GRPCAddr is the gRPC APIs' address. Default ":8081".
	GRPCAddr string
	// MetricsAddr is where /metrics is served; "" turns it off.
	MetricsAddr string
	// MetricsPath is the metrics' path on MetricsAddr. Default /metrics
	// (envoyproxy/ratelimit's PROMETHEUS_PATH).
	MetricsPath string
	// DebugAddr is where /debug/pprof/ is served; "" (the default) turns
	// it off. Profiles reveal the service's internals: give a loopback
	// address, such as 127.0.0.1:6060.
	DebugAddr string
	// GRPCUDS, when set, is a Unix socket path the gRPC APIs are served on
	// too (envoyproxy/ratelimit's GRPC_UDS).
	GRPCUDS string
	// RLConfigAddr is where GET /rlconfig (the rules in force, as text) is
	// served; "" turns it off. DebugAddr serves it too.
	RLConfigAddr string
	// Runtime, when set, is envoyproxy/ratelimit's layout of rule files,
	// read instead of Envoy.RulesDir's flat directory (which then only
	// names it in logs).
	Runtime *RuntimeRules
	// GRPCServer is "lean" (default) or "grpc-go".
	GRPCServer string
	// RulesInterval is how often the rule directory is checked. Default 1 s.
	RulesInterval time.Duration
	// ShutdownTimeout bounds a graceful stop. Default 10 s.
	ShutdownTimeout time.Duration
	// Log receives the service's log; nil means none.
	Log *slog.Logger
}

// defaultCommand is the command line's defaults.
func defaultCommand() Command {
	return Command{
		HTTPAddr: ":8080", GRPCAddr: ":8081", MetricsAddr: ":9091", MetricsPath: "/metrics",
		GRPCServer: GRPCServerLean, RulesInterval: time.Second, ShutdownTimeout: 10 * time.Second,
	}
}

// The values of --grpc-server.
const (
	GRPCServerLean = "lean"
	GRPCServerGo   = "grpc-go"
)

// validate checks the settings that have a flag but no field in the file.
func (c *Command) validate() error {
	if c.GRPCServer != GRPCServerLean && c.GRPCServer != GRPCServerGo {
		return fmt.Errorf("limiterd: --grpc-server must be lean or grpc-go, not %q", c.GRPCServer)
	}
	if !strings.HasPrefix(c.MetricsPath, "/") {
		return fmt.Errorf("limiterd: the metrics path must start with /, not %q", c.MetricsPath)
	}
	if c.RulesInterval <= 0 || c.ShutdownTimeout <= 0 {
		return errors.New("limiterd: --rules-interval and --shutdown-timeout must be positive")
	}
	return nil
}

// flagValues are the flags that are not fields of a Config.
type flagValues struct {
	config, rules, logFormat, logLevel string
	given                              map[string]bool
	grpc                               grpcFlags
}

// newFlagSet binds the flags to v and to c's fields, c's values being
// their defaults.
func newFlagSet(v *flagValues, c *Config, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("limiterd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&v.config, "config", "", "YAML configuration `file` (default: in memory, token bucket 10 tokens at 1/s)")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "REST `address`: POST /limit, GET /health, POST /json")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", c.GRPCAddr, "gRPC `address`: ratelimiter.v1 and Envoy's RateLimitService")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", c.MetricsAddr, "Prometheus /metrics `address`; empty disables")
	fs.StringVar(&c.DebugAddr, "debug-addr", c.DebugAddr, "/debug/pprof/ `address`, such as 127.0.0.1:6060; empty (default) disables")
	fs.StringVar(&c.RLConfigAddr, "rlconfig-addr", c.RLConfigAddr, "GET /rlconfig `address` (the rules in force, as text); empty (default) disables; --debug-addr serves it too")
	fs.StringVar(&v.rules, "rules", "", "`directory` of Envoy rate limit rule files, reloaded when they change")
	fs.StringVar(&c.GRPCServer, "grpc-server", c.GRPCServer, "gRPC server: lean (limiterd's own, unary calls over h2c) or grpc-go")
	fs.StringVar(&v.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&v.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.Bool("version", false, "print the version and the commit limiterd was built from, and exit")
	fs.DurationVar(&c.RulesInterval, "rules-interval", c.RulesInterval, "how often the rule directory is checked for changes")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "the longest a graceful stop waits for in-flight calls")
	addLimitFlags(fs, c)
	addGRPCFlags(fs, &v.grpc)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage of limiterd:")
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), modeHelp)
	}
	return fs
}

// modeHelp ends --help: where the configuration comes from.
const modeHelp = `
The configuration comes from, in this order:
  --config FILE   the file is the whole configuration; envoyproxy/ratelimit's
                  variables that are set are named in a warning and not read.
  envoyproxy/ratelimit mode
                  without --config, when one of envoyproxy/ratelimit's variables
                  (its settings.go: PORT, REDIS_URL, USE_STATSD, RUNTIME_ROOT, ...)
                  is set: every one of them takes its value or envoyproxy/
                  ratelimit's default (USE_STATSD=true, refused: set
                  USE_STATSD=false and USE_PROMETHEUS=true; REDIS_URL its
                  nutcracker socket; LOG_LEVEL=WARN), and one that limiterd
                  cannot honour stops it with one line naming it.
  defaults        neither: in memory, a token bucket of 10 tokens at 1/s.
Flags given on the command line win over all three.
`

// ParseFlags reads the command line and the environment: the file
// --config names, or, without it, envoyproxy/ratelimit's environment
// variables when one of them is set (see the package doc), or the
// defaults; then the flags given over them. Log output goes to stderr. A
// flag error, flag.ErrHelp included, or a *ConfigError is returned as it
// is.
func ParseFlags(args []string, stderr io.Writer) (Config, error) {
	return parseFlags(args, stderr, os.LookupEnv)
}

// parseFlags is ParseFlags reading the environment through lookup.
func parseFlags(args []string, stderr io.Writer, lookup func(string) (string, bool)) (Config, error) {
	// The first pass finds the file; the second puts the flags given over
	// the file's (or the environment's) values.
	v := flagValues{given: map[string]bool{}}
	first := defaultConfig()
	fs := newFlagSet(&v, &first, stderr)
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("limiterd: unexpected argument %q", fs.Arg(0))
	}
	if v.logFormat != "text" && v.logFormat != "json" {
		return Config{}, fmt.Errorf("limiterd: --log-format must be text or json, not %q", v.logFormat)
	}
	if _, err := parseLevel(v.logLevel); err != nil {
		return Config{}, err
	}
	if err := first.Command.validate(); err != nil {
		return Config{}, err
	}
	set := ratelimitVariablesSet(lookup)
	var (
		cfg Config
		env envSettings
		err error
	)
	rlMode := v.config == "" && len(set) > 0
	if rlMode {
		if cfg, env, err = ratelimitConfig(lookup, set[0]); err != nil {
			return cfg, err
		}
	} else {
		if cfg, err = LoadConfig(v.config); err != nil {
			return cfg, err
		}
		cfg.MetricsAddr = fileMetricsAddr(cfg)
	}
	fs = newFlagSet(&v, &cfg, io.Discard)
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	fs.Visit(func(f *flag.Flag) { v.given[f.Name] = true })
	if v.rules != "" {
		cfg.Envoy.RulesDir, cfg.Runtime = v.rules, nil
	}
	if v.given["xds-server"] && !v.given["rules"] {
		cfg.Envoy.RulesDir, cfg.Runtime = "", nil
	}
	applyGRPCFlags(&cfg, &v)
	level, _ := parseLevel(v.logLevel)
	format := v.logFormat
	if rlMode {
		if !v.given["log-level"] {
			level = env.level
		}
		if !v.given["log-format"] {
			format = env.format
		}
	}
	cfg.Log = newLogger(format, level, stderr)
	switch {
	case rlMode:
		cfg.Log.Info("configured by envoyproxy/ratelimit's environment variables and the flags given", "variables", strings.Join(set, ","))
		for _, w := range env.warnings {
			cfg.Log.Warn(w)
		}
	case len(set) > 0:
		cfg.Log.Warn("envoyproxy/ratelimit's variables are set but not read: with --config the file is the whole configuration", "variables", strings.Join(set, ","))
	}
	return cfg, cfg.Validate()
}

// fileMetricsAddr is where /metrics is served unless --metrics-addr says:
// the file's port unless the file turns Prometheus off, :9091 without a
// file.
func fileMetricsAddr(cfg Config) string {
	if p := cfg.Metrics.UsePrometheus; p != nil && !*p {
		return ""
	}
	if cfg.file != "" && cfg.Metrics.Port > 0 {
		return fmt.Sprintf(":%d", cfg.Metrics.Port)
	}
	return cfg.MetricsAddr
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, fmt.Errorf("limiterd: --log-level must be debug, info, warn or error, not %q", s)
	}
	return l, nil
}

func newLogger(format string, level slog.Level, w io.Writer) *slog.Logger {
	ho := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, ho))
	}
	return slog.New(slog.NewTextHandler(w, ho))
}

// ServeError is a server that failed after the service started; Run has
// logged it.
type ServeError struct{ Err error }

// Error implements error.
func (e *ServeError) Error() string { return "limiterd: serving: " + e.Err.Error() }

// Unwrap returns the server's error.
func (e *ServeError) Unwrap() error { return e.Err }

// Run starts the service cfg describes and blocks until ctx ends, then
// stops it gracefully within cfg.ShutdownTimeout, and returns nil. It
// returns at once with the error when cfg is refused (a *ConfigError or an
// *envoyrl.ConfigError) or a listener cannot be opened, and with a
// *ServeError when a server fails while serving (the others are stopped).
// Every goroutine it starts has ended when it returns.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Command.validate(); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	srv, err := newServer(cfg)
	if err != nil {
		return err
	}
	if err := srv.serve(ctx); err != nil {
		cfg.Log.Error("stopped", "err", err.Error())
		return &ServeError{err}
	}
	return nil
}

// ExitCode is the exit status for Run's error: 0 for nil, 2 for a refused
// configuration, 1 for anything else.
func ExitCode(err error) int {
	var ce *ConfigError
	var ee *envoyrl.ConfigError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ce), errors.As(err, &ee):
		return 2
	}
	return 1
}

// Main is limiterd's command: it parses args, runs the service until ctx
// ends, and returns the exit status: 0 after a graceful stop, 1 when a
// server fails or cannot listen, 2 for bad flags or configuration. A
// refused command line or configuration is one line on stderr.
//
// --version prints Version on stderr and returns 0. Main hands go-redis's
// log to cfg.Log (redis.SetLogger): the logger is global to the process,
// so the last Main started logs every client's lines.
func Main(ctx context.Context, args []string, stderr io.Writer) int {
	if versionRequested(args) {
		fmt.Fprintln(stderr, Version())
		return 0
	}
	cfg, err := ParseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, oneLine(err.Error()))
		}
		return 2
	}
	redis.SetLogger(redisLogger{cfg.Log})
	err = Run(ctx, cfg)
	var se *ServeError
	if err != nil && !errors.As(err, &se) {
		fmt.Fprintln(stderr, oneLine(err.Error()))
	}
	return ExitCode(err)
}
