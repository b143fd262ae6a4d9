package redislimit_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
	"github.com/costwise/batcher/limit/redislimit"
)

// hookClock is a fake clock that runs a hook, once, within the next read:
// after the time is read and before it is returned, as if the reader were
// preempted right after its clock read.
type hookClock struct {
	*limittest.Clock
	hook atomic.Pointer[func()]
}

func (c *hookClock) Now() time.Time {
	t := c.Clock.Now()
	if f := c.hook.Swap(nil); f != nil {
		(*f)()
	}
	return t
}

// TestSpendNotDatedBeforeItsUnits: a decision answered without a lock is
// dated at its clock read, so the units it spends must have been held
// then. Here a take's answer lands right after the decision's clock read
// (the remainder set aside for the call, then given back 1 ms later with
// the clock): the decision may be refused at its date, or spend once the
// units are back, but a spend is never dated before they were, for a hot
// key's allowance and for a cold lease. (Dating it at the clock read while
// spending units given later admits, within a window ending at that date,
// units the shared state only released after it.)
func TestSpendNotDatedBeforeItsUnits(t *testing.T) {
	for _, p := range []limit.Policy{
		limit.TokenBucket(1000, limit.PerHour(1)).Named("tb"),
		limit.GCRA(limit.PerHour(1), 1000).Named("gcra"),
	} {
		t.Run("hot/"+p.Name, func(t *testing.T) {
			const lease = 2 * time.Second
			clock := &hookClock{Clock: limittest.NewClock(time.Unix(1_700_000_000, 0))}
			s := leasedStores(t, clock, 1, lease)[0]
			warm(t, clock.Clock, []*redislimit.Store{s}, "hot", p, lease)
			if _, err := s.AllowN(context.Background(), "hot", p, 1); err != nil {
				t.Fatal(err)
			}
			settle(t, s)
			testSpendDate(t, clock, s, "hot", p)
		})
		t.Run("cold/"+p.Name, func(t *testing.T) {
			clock := &hookClock{Clock: limittest.NewClock(time.Unix(1_700_000_000, 0))}
			s := coldStores(t, clock, 1, time.Second, time.Minute)[0]
			if _, err := s.AllowN(context.Background(), "k", p, 1); err != nil { // the lease comes with it
				t.Fatal(err)
			}
			if st := s.AllowanceStats(); st.ColdLeases != 1 {
				t.Fatalf("stats %+v: want one cold lease", st)
			}
			testSpendDate(t, clock, s, "k", p)
		})
	}
}

func testSpendDate(t *testing.T, clock *hookClock, s *redislimit.Store, key string, p limit.Policy) {
	t.Helper()
	local := s.AllowanceStats()
	held, ok := s.SetAsideForTest(key, p)
	if !ok || held < 1 {
		t.Fatalf("the key holds %d units (ok %v), want some", held, ok)
	}
	var back atomic.Int64
	give := func() {
		clock.Advance(time.Millisecond)
		back.Store(clock.Clock.Now().UnixNano())
		s.GiveBackForTest(key, p, held)
	}
	clock.hook.Store(&give)
	dec, err := s.AllowN(context.Background(), key, p, 1)
	if err != nil {
		t.Fatal(err)
	}
	if clock.hook.Load() != nil {
		t.Fatal("the decision read no clock")
	}
	st := s.AllowanceStats()
	if st.Remote != local.Remote {
		t.Fatalf("the decision went to Redis (stats %+v): the test drives the local paths", st)
	}
	if !dec.Allowed {
		return // refused at its clock read, when nothing was held: right too
	}
	if at := s.LastSpendForTest(key, p); at < back.Load() {
		t.Fatalf("the spend is dated %v, %v before its units came back",
			time.Unix(0, at).UTC(), time.Duration(back.Load()-at))
	}
}
