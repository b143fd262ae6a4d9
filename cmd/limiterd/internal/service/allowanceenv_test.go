package service

import (
	"strings"
	"testing"
)

func TestAllowanceEnv(t *testing.T) {
	for _, c := range []struct {
		file bool
		env  string
		want bool
	}{
		{false, "", false}, {true, "", true}, {false, "true", true}, {true, "false", false}, {false, "1", true},
	} {
		cfg := Config{}
		cfg.Backends.Redis.LocalAllowance = c.file
		lookup := func(name string) (string, bool) {
			if name == "REDIS_LOCAL_ALLOWANCE" && c.env != "" {
				return c.env, true
			}
			return "", false
		}
		if err := applyAllowanceEnv(&cfg, lookup); err != nil || cfg.Backends.Redis.LocalAllowance != c.want {
			t.Errorf("file %v, REDIS_LOCAL_ALLOWANCE=%q: %v, %v; want %v", c.file, c.env, cfg.Backends.Redis.LocalAllowance, err, c.want)
		}
	}
	t.Setenv("REDIS_LOCAL_ALLOWANCE", "sometimes")
	code, stderr := runOnce(t, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--metrics-addr", "")
	if code != 2 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "environment") ||
		!strings.Contains(stderr, "REDIS_LOCAL_ALLOWANCE: must be true or false") {
		t.Fatalf("exit %d, stderr %q: want 2 and one line naming the environment and the variable", code, stderr)
	}
}
