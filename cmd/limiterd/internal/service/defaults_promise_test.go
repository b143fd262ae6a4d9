package service

import (
	"io"
	"testing"
	"time"
)

// TestPromiseServerDefaultsApplied: with no file and no flag, the servers
// limiterd builds carry docs/limiterd.md's defaults, written here as the
// doc gives them rather than read from the package's own: REST read-header,
// read, write and idle timeouts of 5 s, 30 s, 10 s and 2 min, a 16 KiB
// header bound, a graceful stop of at most 10 s, and 10,000 metric label
// sets. The behaviour behind each is tested at other values (hostile_test,
// quickstart_promise_test, compare_metrics_test); this pins the value a
// user gets.
func TestPromiseServerDefaultsApplied(t *testing.T) {
	cfg, err := parseFlags([]string{"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"}, io.Discard,
		func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Command.ShutdownTimeout != 10*time.Second {
		t.Errorf("--shutdown-timeout defaults to %v, want 10s", cfg.Command.ShutdownTimeout)
	}
	s, err := newServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()

	hs := s.httpServer()
	for _, c := range []struct {
		name      string
		got, want time.Duration
	}{
		{"read-header timeout", hs.ReadHeaderTimeout, 5 * time.Second},
		{"read timeout", hs.ReadTimeout, 30 * time.Second},
		{"write timeout", hs.WriteTimeout, 10 * time.Second},
		{"idle timeout", hs.IdleTimeout, 2 * time.Minute},
	} {
		if c.got != c.want {
			t.Errorf("REST server's %s: %v, want %v", c.name, c.got, c.want)
		}
	}
	if hs.MaxHeaderBytes != 16<<10 {
		t.Errorf("REST server's header bound: %d bytes, want 16 KiB", hs.MaxHeaderBytes)
	}
	// The other HTTP listeners (metrics, rlconfig, debug) share the bounds.
	ps := s.plainServer(nil)
	if ps.ReadHeaderTimeout != 5*time.Second || ps.ReadTimeout != 30*time.Second ||
		ps.WriteTimeout != 10*time.Second || ps.IdleTimeout != 2*time.Minute || ps.MaxHeaderBytes != 16<<10 {
		t.Errorf("metrics server: timeouts %v / %v / %v / %v, header bound %d; want 5s / 30s / 10s / 2m0s, 16384",
			ps.ReadHeaderTimeout, ps.ReadTimeout, ps.WriteTimeout, ps.IdleTimeout, ps.MaxHeaderBytes)
	}
	if s.metrics.maxSeries != 10_000 {
		t.Errorf("metric label sets bounded at %d, want 10,000", s.metrics.maxSeries)
	}
}
