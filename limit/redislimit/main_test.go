package redislimit_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind, the batches'
// among them. go-redis's cluster client keeps a cleanup loop of its own
// past Close.
func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) != "" {
		os.Exit(holderMain())
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/maintnotifications.(*CircuitBreakerManager).cleanupLoop"))
}
