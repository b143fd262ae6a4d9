package clock

import (
	"testing"
	"time"
)

var start = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func TestFakeTimersFireInOrderAtTheirTime(t *testing.T) {
	f := NewFake(start)
	late := f.NewTimer(3 * time.Second)
	early := f.NewTimer(time.Second)
	if when, ok := f.Next(); !ok || !when.Equal(start.Add(time.Second)) {
		t.Fatalf("Next = %v, %v", when, ok)
	}
	f.Advance(999 * time.Millisecond)
	select {
	case <-early.C():
		t.Fatal("timer fired early")
	default:
	}
	f.Advance(time.Millisecond)
	if got := <-early.C(); !got.Equal(start.Add(time.Second)) {
		t.Fatalf("timer fired with %v", got)
	}
	if late.Stop() != true || late.Stop() != false {
		t.Fatal("Stop should report pending once")
	}
	f.Advance(time.Hour)
	select {
	case <-late.C():
		t.Fatal("a stopped timer fired")
	default:
	}
	if f.Waiters() != 0 {
		t.Fatalf("%d waiters left", f.Waiters())
	}
	late.Reset(time.Second)
	f.Advance(time.Second)
	if got := <-late.C(); !got.Equal(start.Add(time.Hour + 2*time.Second)) {
		t.Fatalf("reset timer fired with %v", got)
	}
}

func TestFakeTickerDropsTicksWhenFull(t *testing.T) {
	f := NewFake(start)
	tk := f.NewTicker(100 * time.Millisecond)
	f.Advance(350 * time.Millisecond) // ticks at 100, 200, 300: the buffer holds one
	if got := <-tk.C(); !got.Equal(start.Add(100 * time.Millisecond)) {
		t.Fatalf("first tick %v", got)
	}
	select {
	case got := <-tk.C():
		t.Fatalf("a second tick %v was kept", got)
	default:
	}
	f.Advance(50 * time.Millisecond)
	if got := <-tk.C(); !got.Equal(start.Add(400 * time.Millisecond)) {
		t.Fatalf("tick after draining %v", got)
	}
	tk.Stop()
	if !f.Now().Equal(start.Add(400 * time.Millisecond)) {
		t.Fatalf("Now = %v", f.Now())
	}
}

func TestFakeWaitForWaiters(t *testing.T) {
	f := NewFake(start)
	done := make(chan struct{})
	go func() { f.NewTimer(time.Second) }()
	if !f.WaitForWaiters(1, done) {
		t.Fatal("WaitForWaiters gave up")
	}
	close(done)
	if f.WaitForWaiters(5, done) {
		t.Fatal("WaitForWaiters reported a count that was never reached")
	}
}
