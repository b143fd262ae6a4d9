// Command sample runs go-batcher's Cosmos DB scenario end to end: replicas
// of a service take ingest jobs over HTTP and write them to a simulated
// datastore that throttles like Cosmos DB, sharing its budget through the
// library; then the same load runs without the library for comparison. It
// prints one line per second, a summary table, and writes an HTML report.
// See README.md in this directory.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main with its streams as arguments; it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "sample:", err)
		return 2
	}
	log, err := newLogger(cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "sample:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// After the first signal, a second one ends the process at once.
		<-ctx.Done()
		stop()
	}()
	switch {
	case cfg.serveDatastore:
		err = serveDatastore(ctx, cfg, log)
	case cfg.single:
		err = runSingle(ctx, cfg, log)
	default:
		_, err = demo(ctx, cfg, log, stdout)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Error().Err(err).Msg("sample failed")
		return 1
	}
	return 0
}

// demo measures the user requests alone (the calibration the latency goal
// is relative to), then runs the scenario with the library and, with
// cfg.compare, without it; it prints the summary to stdout and writes the
// report.
func demo(ctx context.Context, cfg config, log zerolog.Logger, stdout io.Writer) ([]*runResult, error) {
	log.Info().Int("replicas", cfg.replicas).Uint32("budget", cfg.budget).Uint32("reserved", cfg.reserve()).
		Uint32("unused", cfg.unused()).Uint32("shared", cfg.shared()).Uint32("factor", cfg.factor).
		Float64("user_rps", cfg.interactiveRate).Float64("user_ru_per_replica", cfg.interactiveRU()).
		Uint32("ru_per_record", cfg.cost).Str("duration", cfg.duration.String()).Msg("run 1: with the library")
	cal, err := calibrate(ctx, cfg, log.With().Str("run", "calibration").Logger())
	if err != nil {
		return nil, err
	}
	if cal.Users.Requests > 0 {
		log.Info().Dur("user_p99", cal.Users.P99).Int("user_requests", cal.Users.Requests).
			Dur("latency_goal", latencyGoal(cfg, cal)).Msg("calibrated: the user requests alone, no bulk job")
	}
	var runs []*runResult
	res, err := runScenario(ctx, cfg, true, log.With().Str("run", "library").Logger())
	if err != nil {
		return nil, err
	}
	runs = append(runs, res)
	if cfg.compare {
		log.Info().Int("workers_per_replica", cfg.workers).Msg("run 2: the same load without the library")
		res, err := runScenario(ctx, cfg, false, log.With().Str("run", "direct").Logger())
		if err != nil {
			return nil, err
		}
		runs = append(runs, res)
	}
	fmt.Fprintln(stdout)
	printSummary(stdout, runs)
	printGoals(stdout, goals(cfg, runs, cal))
	if err := printSnippet(stdout); err != nil {
		return runs, err
	}
	fmt.Fprintln(stdout, "\n"+headline(runs)+"\n"+outcome(cfg, runs))
	if cfg.report != "" {
		if err := writeReport(cfg.report, cfg, runs, cal); err != nil {
			return runs, err
		}
		log.Info().Str("path", cfg.report).Msg("report written")
	}
	return runs, nil
}

// newLogger returns the logger the flags ask for: zerolog's console writer
// (colours only on a terminal) or JSON lines.
func newLogger(cfg config, w io.Writer) (zerolog.Logger, error) {
	level, err := zerolog.ParseLevel(cfg.logLevel)
	if err != nil {
		return zerolog.Nop(), fmt.Errorf("--log-level: %w", err)
	}
	zerolog.TimeFieldFormat = time.RFC3339Nano
	out := w
	if cfg.logFormat == "console" {
		out = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000", NoColor: !isTerminal(w)}
	}
	return zerolog.New(out).Level(level).With().Timestamp().Logger(), nil
}

// isTerminal reports whether w is a character device such as a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
