package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/internal/redistest"
)

// TestPromiseRedisPasswordEnvNeverLogged: docs/limiterd.md, Configuration:
// "The Redis password may come from the environment instead:
// LIMITERD_REDIS_PASSWORD (or the variable password_env names) wins over
// the file; it is never logged." Against a redis-server with
// --requirepass, limiterd configured with password_env (and a wrong
// password in the file) decides on Redis; started with a wrong password in
// that variable, Redis refuses it and limiterd, fail_closed, answers 503
// and its health says unavailable. Neither password, nor the file's, is
// on standard error (at --log-level debug) after the start, a request, the
// refused start, or the stop.
func TestPromiseRedisPasswordEnvNeverLogged(t *testing.T) {
	const env = "LIMITERD_PROMISE_REDIS_PW"
	good, wrong, inFile := secret(t, "good"), secret(t, "wrong"), secret(t, "file")
	srv := redistest.StartServer(t, "--requirepass", good)
	config := fmt.Sprintf("store: redis\non_store_failure: fail_closed\nbackends:\n  redis: {addr: %q, password: %q, password_env: %s}\n",
		srv.Addr(), inFile, env)
	secrets := map[string]string{"the password": good, "the wrong password": wrong, "the file's password": inFile}
	noSecret := func(p *proc, when string) {
		t.Helper()
		log := p.stderr.String()
		for what, s := range secrets {
			if strings.Contains(log, s) {
				t.Errorf("%s: %s is on limiterd's standard error:\n%s", when, what, log)
			}
		}
	}

	t.Setenv(env, good)
	p := start(t, config, "--log-level", "debug")
	noSecret(p, "after the start")
	resp := p.post("/limit", "", "X-Client-Key", "pw-promise")
	if resp.StatusCode != http.StatusOK || resp.Header.Get(FailOpenHeader) != "" {
		t.Fatalf("POST /limit with the password from %s: %d %s, want 200 decided by Redis; log: %s",
			env, resp.StatusCode, body(t, resp), p.stderr.String())
	}
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: good})
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if n, err := rc.DBSize(ctx).Result(); err != nil || n == 0 {
		t.Fatalf("keys in the Redis that requires the password: %d, %v; want the call's key", n, err)
	}
	if code, b := p.get("http://" + p.http + "/health"); code != http.StatusOK {
		t.Fatalf("GET /health with the password: %d %s, want 200", code, b)
	}
	noSecret(p, "after a request")
	if code := p.stop(); code != 0 {
		t.Fatalf("limiterd exited with %d, want 0; log: %s", code, p.stderr.String())
	}
	noSecret(p, "after the stop")

	t.Setenv(env, wrong)
	bad := start(t, config, "--log-level", "debug")
	noSecret(bad, "after a start with a wrong password")
	resp = bad.post("/limit", "", "X-Client-Key", "pw-promise-wrong")
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("POST /limit with a wrong password, fail_closed: %d %s, want 503: Redis refuses the password", resp.StatusCode, body(t, resp))
	}
	if code, b := bad.get("http://" + bad.http + "/health"); code != http.StatusServiceUnavailable {
		t.Fatalf("GET /health with a wrong password: %d %s, want 503", code, b)
	}
	noSecret(bad, "after a request with a wrong password")
	bad.stop()
	noSecret(bad, "after the stop of the one with a wrong password")
}

// secret returns a password unlike anything else limiterd could print.
func secret(t *testing.T, what string) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return what + "-" + hex.EncodeToString(b)
}
