package examples

import (
	"os"
	"os/exec"
	"path"
	"testing"
)

// promtool finds promtool (Debian's prometheus package). Without it the
// test is skipped, except under CI=true, where it fails: scripts/test
// installs it.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool is not installed (apt-get install prometheus)")
		}
		t.Skip("promtool is not installed (apt-get install prometheus)")
	}
	return p
}

func runPromtool(t *testing.T, file string, args ...string) {
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = path.Dir(file)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %v: %v\n%s", args, err, out)
	}
	t.Logf("promtool %v:\n%s", args, out)
}

// checkPromRules checks a rule file's syntax, expressions and templates.
func checkPromRules(t *testing.T, file string) {
	runPromtool(t, file, "check", "rules", path.Base(file))
}

// checkPromRuleTests runs a rule file's unit tests.
func checkPromRuleTests(t *testing.T, file string) {
	runPromtool(t, file, "test", "rules", path.Base(file))
}
