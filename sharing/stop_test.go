package sharing

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costwise/batcher/lease"
	"github.com/costwise/batcher/leasetest"
	"go.uber.org/goleak"
)

// deafManager is a store whose Release ignores its context and answers
// only after a delay, as a go-redis call blocked on a frozen server does
// until the client's read timeout.
type deafManager struct {
	*MemoryLeaseManager
	delay time.Duration
}

func (d deafManager) Release(ctx context.Context, partition int, owner string) error {
	time.Sleep(d.delay)
	return d.MemoryLeaseManager.Release(context.Background(), partition, owner)
}

// waitNoLeaks fails the test unless, within limit, no goroutine is left
// but those opts ignore: goleak.VerifyNone with a longer patience, for a
// goroutine that ends when a store call it cannot cancel returns.
func waitNoLeaks(t *testing.T, limit time.Duration, opts ...goleak.Option) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := goleak.Find(opts...)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines still running %v after the test: %v", limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startedResource returns a started resource on mgr with short intervals
// and rec listening, that wants its whole shared capacity.
func startedResource(t *testing.T, r *Resource, listeners ...func(string, int, string, interface{})) *Resource {
	t.Helper()
	for _, l := range listeners {
		r.AddListener(l)
	}
	if err := r.Provision(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSharedStopReturnsWhenStoreIgnoresContext checks that Stop returns
// within StopTimeout when the store's calls ignore cancellation, that
// Capacity is the reserved capacity at once, and that the loop goroutine
// ends when the calls do (goleak waits for it).
func TestSharedStopReturnsWhenStoreIgnoresContext(t *testing.T) {
	defer waitNoLeaks(t, 10*time.Second, goleak.IgnoreCurrent())
	mem := NewMemoryLeaseManager()
	var log eventLog
	r := startedResource(t, New(deafManager{mem, 3 * time.Second}, 4).WithReservedCapacity(1).WithMaxInterval(20), log.listen)
	r.GiveMe(5)
	eventually(t, "capacity 5", func() bool { return r.Capacity() == 5 })
	start := time.Now()
	r.Stop()
	took := time.Since(start)
	if took > StopTimeout+500*time.Millisecond {
		t.Fatalf("Stop took %v with a store that ignores cancellation, want at most %v", took, StopTimeout)
	}
	if got := r.Capacity(); got != 1 {
		t.Fatalf("Capacity() right after Stop = %d, want the reserved 1", got)
	}
	if n := log.count(ShutdownEvent); n != 1 {
		t.Fatalf("%d shutdown events, want 1", n)
	}
	t.Logf("Stop returned in %v; the release finishes in the background", took)
}

// TestSharedStopFromListeners calls Stop from the listeners the loop calls
// (allocated, error) and from a shutdown listener: none may deadlock, every
// later Stop returns, and the leases are released once the listener
// returns.
func TestSharedStopFromListeners(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, on := range []string{AllocatedEvent, ErrorEvent, ShutdownEvent} {
		t.Run(on, func(t *testing.T) {
			mem := NewMemoryLeaseManager()
			fault := leasetest.NewFaultManager(mem)
			r := New(fault, 4).WithMaxInterval(20)
			stopped := make(chan struct{})
			var calls atomic.Int32
			r.AddListener(func(event string, _ int, _ string, _ interface{}) {
				if event == on && calls.Add(1) == 1 {
					r.Stop()
					close(stopped)
				}
			})
			startedResource(t, r)
			switch on {
			case ErrorEvent:
				fault.SetFailure(errors.New("store down"))
				r.GiveMe(4)
			case AllocatedEvent:
				r.GiveMe(4)
			case ShutdownEvent:
				r.GiveMe(4)
				eventually(t, "capacity 4", func() bool { return r.Capacity() == 4 })
				go r.Stop()
			}
			select {
			case <-stopped:
			case <-time.After(5 * time.Second):
				t.Fatalf("Stop called from a %s listener did not return", on)
			}
			done := make(chan struct{})
			go func() { r.Stop(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("a later Stop did not return")
			}
			fault.SetFailure(nil)
			if got := r.Capacity(); got != 0 {
				t.Fatalf("Capacity() after Stop = %d, want 0", got)
			}
			eventually(t, "every lease released", func() bool {
				snap, err := mem.Snapshot(context.Background(), 4)
				if err != nil {
					return false
				}
				for _, s := range snap.Partitions {
					if s != lease.PartitionFree {
						return false
					}
				}
				return true
			})
		})
	}
}

// TestSharedStopBeforeStartFromShutdownListener stops a resource that was
// never started, with a shutdown listener that calls Stop again.
func TestSharedStopBeforeStartFromShutdownListener(t *testing.T) {
	r := New(NewMemoryLeaseManager(), 4)
	var shutdowns atomic.Int32
	r.AddListener(func(event string, _ int, _ string, _ interface{}) {
		if event == ShutdownEvent {
			shutdowns.Add(1)
			r.Stop()
		}
	})
	done := make(chan struct{})
	go func() { r.Stop(); r.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop before Start with a shutdown listener calling Stop did not return")
	}
	if n := shutdowns.Load(); n != 1 {
		t.Fatalf("%d shutdown events, want 1", n)
	}
}

// TestSharedListenerPanicRecovered registers a listener that panics on
// every event beside one that records: the loop keeps working, the recorder
// gets an error event carrying a ListenerPanicError for each panic, the
// panicking listener stays registered, and its panic on the error event is
// not reported again.
func TestSharedListenerPanicRecovered(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var panics atomic.Int32
	var log eventLog
	var reported atomic.Int32
	r := New(NewMemoryLeaseManager(), 4).WithMaxInterval(20)
	r.AddListener(func(event string, _ int, _ string, _ interface{}) {
		panics.Add(1)
		panic("listener bug on " + event)
	})
	r.AddListener(log.listen)
	r.AddListener(func(event string, _ int, _ string, md interface{}) {
		var pe ListenerPanicError
		if err, ok := md.(error); ok && errors.As(err, &pe) && event == ErrorEvent {
			reported.Add(1)
			// A panic on the report is not reported again.
			panic("listener bug on a report")
		}
	})
	startedResource(t, r)
	r.GiveMe(4)
	eventually(t, "capacity 4 despite the panicking listener", func() bool { return r.Capacity() == 4 })
	r.Stop()
	var events, errs int32
	log.mu.Lock()
	for _, e := range log.events {
		if strings.HasPrefix(e, ErrorEvent+":") {
			errs++
		} else {
			events++
		}
	}
	log.mu.Unlock()
	if p, rep := panics.Load(), reported.Load(); p != events || rep != events || errs != events {
		t.Fatalf("%d events, %d panics, %d reports seen by one listener, %d by another; want one panic and one report per event, no report of a report",
			events, p, rep, errs)
	}
}
