package service

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSharedPingOneAtATime: checks that overlap share the ping in flight,
// each ends at its own deadline while the ping hangs, and the next check
// after it returns sends a new one that gets its answer.
func TestSharedPingOneAtATime(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	down := errors.New("down")
	p := &sharedPing{ping: func(context.Context) error {
		if calls.Add(1) == 1 {
			<-release
			return down
		}
		return nil
	}}
	// The first check sends the ping and waits for it.
	got := make(chan error, 1)
	go func() { got <- p.Ping(context.Background()) }()
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			if err := p.Ping(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("a check while the ping hangs: %v, want its deadline", err)
			}
		}()
	}
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("100 overlapping checks sent %d pings, want 1", n)
	}
	// The check that waited for the hung ping gets its answer.
	close(release)
	if err := <-got; !errors.Is(err, down) {
		t.Fatalf("the check that waited: %v, want the ping's error", err)
	}
	if err := p.Ping(context.Background()); err != nil || calls.Load() != 2 {
		t.Fatalf("the next check: %v after %d pings, want nil after a new one", err, calls.Load())
	}
}
