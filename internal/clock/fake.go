package clock

import (
	"sort"
	"sync"
	"time"
)

// Fake is a Clock whose time moves only when Advance or Set is called.
// Timers and tickers whose time has come fire during Advance, in time order.
// Channels have a buffer of one, and a tick is dropped when the buffer is
// full, as with the real ticker. Fake is safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*fakeWaiter
	changed chan struct{} // closed and replaced whenever a timer is added
}

type fakeWaiter struct {
	clock  *Fake
	when   time.Time
	period time.Duration // zero for a timer
	ch     chan time.Time
	active bool
}

// NewFake returns a fake clock set to start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer that fires when the fake time reaches Now()+d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	w := &fakeWaiter{clock: f, ch: make(chan time.Time, 1)}
	f.mu.Lock()
	f.schedule(w, d)
	f.mu.Unlock()
	return (*fakeTimer)(w)
}

// NewTicker returns a ticker that fires every d of fake time.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	w := &fakeWaiter{clock: f, period: d, ch: make(chan time.Time, 1)}
	f.mu.Lock()
	f.schedule(w, d)
	f.mu.Unlock()
	return (*fakeTicker)(w)
}

// schedule requires f.mu.
func (f *Fake) schedule(w *fakeWaiter, d time.Duration) {
	w.when = f.now.Add(d)
	if !w.active {
		w.active = true
		f.waiters = append(f.waiters, w)
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

// unschedule requires f.mu; it reports whether w was pending.
func (f *Fake) unschedule(w *fakeWaiter) bool {
	if !w.active {
		return false
	}
	w.active = false
	for i, x := range f.waiters {
		if x == w {
			f.waiters = append(f.waiters[:i], f.waiters[i+1:]...)
			break
		}
	}
	return true
}

// Advance moves the fake time forward by d, firing what falls due on the way.
func (f *Fake) Advance(d time.Duration) {
	f.Set(f.Now().Add(d))
}

// Set moves the fake time to t (never backwards), firing what falls due.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		w := f.next(t)
		if w == nil {
			break
		}
		f.now = w.when
		select {
		case w.ch <- w.when:
		default:
		}
		if w.period > 0 {
			w.when = w.when.Add(w.period)
		} else {
			f.unschedule(w)
		}
	}
	if t.After(f.now) {
		f.now = t
	}
}

// next requires f.mu; it returns the earliest waiter due at or before t.
func (f *Fake) next(t time.Time) *fakeWaiter {
	sort.SliceStable(f.waiters, func(i, j int) bool { return f.waiters[i].when.Before(f.waiters[j].when) })
	if len(f.waiters) == 0 || f.waiters[0].when.After(t) {
		return nil
	}
	return f.waiters[0]
}

// Waiters returns how many timers and tickers are pending.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

// WaitForWaiters blocks until at least n timers and tickers are pending or
// the done channel closes; it reports whether the count was reached. Tests
// use it to know that a loop has armed its timers before advancing time.
func (f *Fake) WaitForWaiters(n int, done <-chan struct{}) bool {
	for {
		f.mu.Lock()
		count, ch := len(f.waiters), f.changed
		f.mu.Unlock()
		if count >= n {
			return true
		}
		select {
		case <-ch:
		case <-done:
			return false
		}
	}
}

type fakeTimer fakeWaiter

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	return t.clock.unschedule((*fakeWaiter)(t))
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	was := t.active
	t.clock.schedule((*fakeWaiter)(t), d)
	return was
}

type fakeTicker fakeWaiter

func (t *fakeTicker) C() <-chan time.Time { return t.ch }

func (t *fakeTicker) Stop() {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	t.clock.unschedule((*fakeWaiter)(t))
}

// Next returns when the earliest pending timer or ticker falls due; ok is
// false when none is pending. Tests use it to jump straight to the next
// moment anything can happen.
func (f *Fake) Next() (when time.Time, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.next(time.Unix(1<<62, 0))
	if w == nil {
		return time.Time{}, false
	}
	return w.when, true
}
