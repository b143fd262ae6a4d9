package service

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// envoyRatelimitVersion is the module version of envoyproxy/ratelimit the
// comparison tests build. The project publishes no tagged module versions,
// so it is the pseudo-version of a commit (scripts/compare-envoy-ratelimit
// names the same one).
const envoyRatelimitVersion = "v1.4.1-0.20260122083618-3fb702589d36"

// envoyRatelimitBuild holds the outcome of the one build a test process
// makes.
var envoyRatelimitBuild struct {
	once sync.Once
	bin  string
	err  error
}

// envoyRatelimitBin returns envoyproxy/ratelimit's service_cmd:
// LIMITERD_ENVOY_RATELIMIT_BIN when set, or else the one built from the Go
// module proxy at envoyRatelimitVersion into the user's cache directory,
// where it is kept for the next run (the first build takes minutes).
// A build that fails fails the test under CI=true and skips it elsewhere.
// go test -short skips the test.
func envoyRatelimitBin(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no comparison with envoyproxy/ratelimit")
	}
	if bin := os.Getenv("LIMITERD_ENVOY_RATELIMIT_BIN"); bin != "" {
		return bin
	}
	_, cached := envoyRatelimitCached()
	envoyRatelimitBuild.once.Do(func() {
		start := time.Now()
		envoyRatelimitBuild.bin, envoyRatelimitBuild.err = buildEnvoyRatelimit()
		if !cached && envoyRatelimitBuild.err == nil {
			t.Logf("built envoyproxy/ratelimit@%s in %v: %s", envoyRatelimitVersion, time.Since(start).Round(time.Second), envoyRatelimitBuild.bin)
		}
	})
	if err := envoyRatelimitBuild.err; err != nil {
		msg := fmt.Sprintf("building envoyproxy/ratelimit@%s: %v", envoyRatelimitVersion, err)
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (CI=true: the comparison with envoyproxy/ratelimit must run)", msg)
		}
		t.Skipf("%s; set LIMITERD_ENVOY_RATELIMIT_BIN to a built service_cmd", msg)
	}
	return envoyRatelimitBuild.bin
}

// envoyRatelimitCached returns where the build is kept and whether it is
// there.
func envoyRatelimitCached() (string, bool) {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	bin := filepath.Join(dir, "limiterd-tests", "envoy-ratelimit@"+envoyRatelimitVersion, "service_cmd")
	fi, err := os.Stat(bin)
	return bin, err == nil && fi.Mode().IsRegular()
}

// buildEnvoyRatelimit runs go install in an empty directory (no go.mod, so
// the module is resolved on its own and the project's go.mod is left
// alone), then moves the binary into place with a rename, which a
// concurrent build cannot tear.
func buildEnvoyRatelimit() (string, error) {
	bin, cached := envoyRatelimitCached()
	if cached {
		return bin, nil
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("no go command: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	work, err := os.MkdirTemp(filepath.Dir(bin), "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	cmd := exec.Command(goCmd, "install", "github.com/envoyproxy/ratelimit/src/service_cmd@"+envoyRatelimitVersion)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "GOBIN="+filepath.Join(work, "bin"), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go install: %w\n%s", err, lastLines(string(out), 20))
	}
	if err := os.Rename(filepath.Join(work, "bin", "service_cmd"), bin); err != nil {
		return "", err
	}
	return bin, nil
}

// lastLines keeps the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
