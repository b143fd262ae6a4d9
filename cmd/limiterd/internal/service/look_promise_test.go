package service

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/costwise/batcher/internal/redistest"
)

// lookConfig is a token bucket of 3 tokens refilled at one token per
// 1,000 s: the remaining count, whole tokens, cannot change during the test
// but by what the calls spend.
const lookConfig = "use_algo: token_bucket\nalgo_settings: {capacity: 3, rate: 0.001}\n"

// TestPromiseLookDoesNotSpend: docs/limiterd.md, APIs: POST /limit takes
// its cost in X-Required-Tokens, "0 only looks" (docs/limits.md: "0 only
// looks and is always allowed"). A look answers the key's state, allowed,
// with the remaining count, and spends nothing: at 1 token left, looks say
// 1 remaining again and again, a real call of 1 token is still admitted,
// and a look after it says 0 remaining, still allowed, where a real call
// is refused. On the memory store and on Redis.
func TestPromiseLookDoesNotSpend(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		testLookDoesNotSpend(t, start(t, lookConfig))
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.StartServer(t)
		testLookDoesNotSpend(t, start(t, lookConfig+fmt.Sprintf("store: redis\nbackends:\n  redis: {addr: %q}\n", srv.Addr())))
	})
}

func testLookDoesNotSpend(t *testing.T, p *proc) {
	const key = "look-promise"
	if st, a := limitCall(t, p, key, "2"); st != http.StatusOK || a.remaining != 1 {
		t.Fatalf("spending 2 of 3 tokens: %d, %d remaining; want 200, 1", st, a.remaining)
	}
	for i := range 5 {
		st, a := limitCall(t, p, key, "0")
		if st != http.StatusOK || !a.allowed || a.remaining != 1 {
			t.Fatalf("look %d at 1 token left: %d, allowed %v, %d remaining; want 200, allowed, 1 remaining (a look spends nothing)",
				i+1, st, a.allowed, a.remaining)
		}
	}
	if st, a := limitCall(t, p, key, "1"); st != http.StatusOK || a.remaining != 0 {
		t.Fatalf("the last token after 5 looks: %d, %d remaining; want 200, 0: the looks spent it", st, a.remaining)
	}
	st, a := limitCall(t, p, key, "0")
	if st != http.StatusOK || !a.allowed || a.remaining != 0 {
		t.Fatalf("a look at 0 tokens left: %d, allowed %v, %d remaining; want 200, allowed (a look is always allowed), 0 remaining",
			st, a.allowed, a.remaining)
	}
	if st, _ := limitCall(t, p, key, "1"); st != http.StatusTooManyRequests {
		t.Fatalf("a real call at 0 tokens left: %d, want 429", st)
	}
}

// lookAnswer is what a POST /limit answer says: allowed, and the remaining
// whole tokens of the Ratelimit header, which the JSON body of a 200 must
// agree with.
type lookAnswer struct {
	allowed   bool
	remaining int64
}

// limitCall sends POST /limit for key at a cost of tokens and returns its
// status and answer.
func limitCall(t *testing.T, p *proc, key, tokens string) (int, lookAnswer) {
	t.Helper()
	resp := p.post("/limit", "", "X-Client-Key", key, "X-Required-Tokens", tokens)
	b := body(t, resp)
	var a lookAnswer
	h := resp.Header.Get("Ratelimit")
	_, r, ok := strings.Cut(h, ";r=")
	if !ok {
		t.Fatalf("POST /limit (tokens %s): no remaining count in Ratelimit %q; body %s", tokens, h, b)
	}
	if _, err := fmt.Sscanf(r, "%d", &a.remaining); err != nil {
		t.Fatalf("Ratelimit %q: %v", h, err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, a
	}
	var lb limitBody
	if err := json.Unmarshal([]byte(b), &lb); err != nil {
		t.Fatalf("POST /limit (tokens %s): body %q: %v", tokens, b, err)
	}
	if int64(math.Floor(lb.Remaining)) != a.remaining {
		t.Fatalf("POST /limit (tokens %s): body says %v remaining, Ratelimit %q", tokens, lb.Remaining, h)
	}
	a.allowed = lb.Allowed
	return resp.StatusCode, a
}
