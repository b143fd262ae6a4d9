package redislease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// sharedClient connects to the shared test server (see redistest.Addr).
func sharedClient(t testing.TB) *redis.Client {
	t.Helper()
	return redistest.Shared(t)
}

// testPrefix returns a key prefix no other test uses and deletes every key
// under it when the test ends, leaving other users' keys alone.
func testPrefix(t testing.TB, c redis.UniversalClient) string {
	t.Helper()
	prefix := "redislease-test-" + uuid.NewString()
	t.Cleanup(func() { deleteKeys(c, prefix) })
	return prefix
}

// deleteKeys deletes the keys of the resource with prefix, as a store that
// lost its data would.
func deleteKeys(c redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, "{"+prefix+"}:*", 100).Iterator()
	for iter.Next(ctx) {
		c.Del(ctx, iter.Val())
	}
}

// serverMillis reads the server's clock in milliseconds.
func serverMillis(t testing.TB, c redis.UniversalClient) int64 {
	t.Helper()
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return now.UnixMilli()
}

// eventually polls cond until it holds or timeout passes. The lease loop
// runs on its own goroutine against a real server, so polling with a
// deadline is the only way to observe it.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true within %v", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// errorsAsType reports whether err matches target's type; a small wrapper
// to keep assertions on one line.
func errorsAsType[T error](err error) (T, bool) {
	var target T
	ok := errors.As(err, &target)
	return target, ok
}
