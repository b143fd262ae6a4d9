package sharing

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/costwise/batcher/lease"
	"github.com/costwise/batcher/leasetest"
)

// outage makes every call to the store fail from now until d has passed,
// and returns when the store answers again. A stopped store refuses calls
// at once; a frozen one (frozen) holds each call until it times out, as a
// go-redis call to a server stopped with SIGSTOP does, or until the store
// answers again, whichever comes first. The store keeps its data.
func (s *sim) outage(d time.Duration, frozen bool) time.Time {
	end := s.clock.Now().Add(d)
	var failure error = errors.New("store unreachable")
	if frozen {
		failure = context.DeadlineExceeded
	}
	s.mgr.SetFailure(failure)
	s.mgr.SetDelay(func(context.Context) {
		now := s.clock.Now()
		if frozen && now.Before(end) {
			s.clock.Set(minTime(now.Add(s.inst[0].r.callTimeout()), end))
		}
		if !s.clock.Now().Before(end) {
			s.mgr.SetFailure(nil)
			s.mgr.SetDelay(nil)
		}
	})
	return end
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// recovery watches the instances for watch after the store answered again
// at back: it returns how long until they counted, and held at the store,
// at least 90 % of the shared capacity, and the least they counted from
// then on (a recovery that takes everything and gives it back is no
// recovery). step runs the passes until its end, calling check after each.
func (s *sim) recovery(back time.Time, watch time.Duration, step func(end time.Time, check func())) (time.Duration, uint32) {
	back90, after := time.Duration(-1), uint32(1<<31)
	shared := s.inst[0].r.shared.Load()
	step(back.Add(watch), func() {
		counted, _ := s.overUse()
		if back90 < 0 && counted*10 >= shared*9 && s.backed()*10 >= shared*9 {
			back90 = s.clock.Now().Sub(back)
		}
		if back90 >= 0 {
			after = min(after, counted)
		}
	})
	return back90, after
}

// TestSharedRecoversAfterOutage stops or freezes the store, keeping its
// data, for 1 to 30 s under four instances that share 20 partitions: within
// 2 s of the store answering again they count at least 90 % of the
// capacity, on leases the store shows them holding, and keep it from then
// on; the
// safety check after every pass finds no partition counted twice.
func TestSharedRecoversAfterOutage(t *testing.T) {
	for _, frozen := range []bool{false, true} {
		for k, d := range []time.Duration{time.Second, 5 * time.Second, 12 * time.Second, 30 * time.Second} {
			t.Run(fmt.Sprintf("frozen=%v/%v", frozen, d), func(t *testing.T) {
				cfg := issueConfig
				cfg.instances = 4
				s := newSim(t, cfg)
				for i := range s.inst {
					s.giveMe(i, 20000)
				}
				// Outages start at different points of the renewal rounds.
				s.runFor(20*time.Second+time.Duration(k)*2300*time.Millisecond, nil)
				back := s.outage(d, frozen)
				s.runFor(d, nil)
				back90, low := s.recovery(back, 6*time.Second, s.runSafely)
				t.Logf("90 %% back %v after the store answered; least counted after %d", back90, low)
				if back90 < 0 || back90 > 2*time.Second || low < 18000 {
					t.Fatalf("after a %v outage: 90 %% back after %v, least counted after %d; want within 2 s and at least 18000",
						d, back90, low)
				}
			})
		}
	}
}

// runSafely runs passes until end as runFor does, with the safety check
// after every pass, calling check after each.
func (s *sim) runSafely(end time.Time, check func()) {
	s.t.Helper()
	s.runFor(end.Sub(s.clock.Now()), check)
}

// TestSharedRecoversWhenAnInstanceReconnectsLate stops the store for 30 s,
// which lets every lease and every demand record lapse, under four
// instances that share 20 partitions, and keeps one instance's calls failing
// for up to 1.5 s after the store answers the others: a go-redis client
// whose pool gave up dialing during the outage fails every call until its
// next dial, about a second apart. The others must not take that instance's
// share for themselves only to hand it back when it shows up: from the
// moment the instances count 90 % of the capacity, they keep at least that
// much, and they reach it within 2 s of the late instance's calls getting
// through. Before the lapsed demands were kept for two seconds more than
// two maxIntervals, 2 of these 15 cases failed: the least counted after 90 %
// was 15,000 and 17,000.
func TestSharedRecoversWhenAnInstanceReconnectsLate(t *testing.T) {
	for _, late := range []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond} {
		for seed := uint64(1); seed <= 5; seed++ {
			t.Run(fmt.Sprintf("%v/%d", late, seed), func(t *testing.T) {
				cfg := issueConfig
				cfg.instances = 3
				cfg.seed = seed
				s := newSim(t, cfg)
				lateMgr := leasetest.NewFaultManager(s.mgr)
				s.addWith(cfg, 3, lateMgr)
				for i := range s.inst {
					s.giveMe(i, 20000)
				}
				s.runFor(20*time.Second+time.Duration(seed)*1700*time.Millisecond, nil)
				back := s.outage(30*time.Second, false)
				lateMgr.SetFailure(errors.New("dial tcp: connection refused"))
				lateMgr.SetDelay(func(context.Context) {
					if !s.clock.Now().Before(back.Add(late)) {
						lateMgr.SetFailure(nil)
						lateMgr.SetDelay(nil)
					}
				})
				s.runFor(30*time.Second, nil)
				back90, low := s.recovery(back, 6*time.Second, s.runSafely)
				t.Logf("90 %% back %v after the store answered; least counted after %d", back90, low)
				if back90 < 0 || back90 > late+2*time.Second || low < 18000 {
					t.Fatalf("one instance back %v late: 90 %% back after %v, least counted after %d; want within %v and at least 18000",
						late, back90, low, late+2*time.Second)
				}
			})
		}
	}
}

// TestSharedRecoversAfterOutageAndWipe stops the store for up to 2 s and
// brings it back empty, under four instances that share 20 partitions:
// every instance still counts its leases, so each must re-take them, however
// it notices the loss (a renewal refused because another instance
// provisioned the store again, a snapshot, a missing partition), and the
// capacity is back at the store within 2 s, and stays, with no over-use at any moment.
func TestSharedRecoversAfterOutageAndWipe(t *testing.T) {
	for _, d := range []time.Duration{0, time.Second, 2 * time.Second} {
		for seed := 0; seed < 5; seed++ {
			t.Run(fmt.Sprintf("%v/%d", d, seed), func(t *testing.T) {
				cfg := issueConfig
				cfg.instances = 4
				s := newSim(t, cfg)
				for i := range s.inst {
					s.giveMe(i, 20000)
				}
				s.runFor(20*time.Second+time.Duration(seed)*1700*time.Millisecond, nil)
				back := s.outage(d, false)
				s.runFor(d, nil)
				s.loseData()
				back90, low := s.recovery(back, 6*time.Second, func(end time.Time, check func()) {
					s.stepUntil(end, func() {
						if total, doubled := s.overUse(); doubled > 0 || total > 20000 {
							t.Fatalf("%v after the store came back empty: %d counted, %d partitions twice",
								s.clock.Now().Sub(back), total, doubled)
						}
						check()
					})
				})
				t.Logf("90 %% back %v after the store answered; least counted after %d", back90, low)
				if back90 < 0 || back90 > 2*time.Second || low < 18000 {
					t.Fatalf("after a %v outage and a loss: 90 %% back after %v, least counted after %d; want within 2 s and at least 18000",
						d, back90, low)
				}
			})
		}
	}
}

// TestSharedAcquireAnsweredLate loses the answers to an instance's
// acquires, which the store carried out (a call that timed out on a frozen
// server, run when it resumed): the instance holds the leases without
// counting them, and nobody else can take them. Within 2 s of the store
// answering again it counts them, instead of a lease duration later when
// they run out, and the safety check after every pass finds no partition
// counted by an instance the store does not show holding it.
func TestSharedAcquireAnsweredLate(t *testing.T) {
	s := newSim(t, simConfig{instances: 1, shared: 5})
	timedOut := context.DeadlineExceeded
	s.mgr.SetLostAnswers(func(op string) error {
		if op == "Acquire" {
			return timedOut
		}
		return nil
	})
	s.giveMe(0, 5)
	s.runFor(0, nil)
	if got := s.held(0); got != 0 {
		t.Fatalf("the instance counts %d partitions whose acquires it had no answer to, want 0", got)
	}
	snap, err := s.mem.Snapshot(s.ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	for p, st := range snap.Partitions {
		if st != lease.PartitionLeased {
			t.Fatalf("partition %d is %v at the store, want leased: the lost acquires were carried out", p, st)
		}
	}
	s.mgr.SetLostAnswers(nil)
	back := s.clock.Now()
	for s.held(0) < 5 {
		if s.clock.Now().Sub(back) > 2*time.Second {
			t.Fatalf("%v after the store answered again the instance counts %d of the 5 partitions it holds, want 5 within 2 s",
				s.clock.Now().Sub(back), s.held(0))
		}
		s.runFor(10*time.Millisecond, nil)
	}
	t.Logf("the leases granted without an answer counted %v after the store answered again", s.clock.Now().Sub(back))
}

// TestSharedCapacityEventWhileStoreHangs: with a store that hangs (each
// call held for its timeout), the capacity event that tells listeners the
// leases stopped counting comes within one call's timeout of the moment
// Capacity falls, not at the end of a pass of several hung calls (12.5 s
// late, found by a black-box audit). Fake clock, defaults: the leases,
// acquired at the start, count until 13 s.
func TestSharedCapacityEventWhileStoreHangs(t *testing.T) {
	s := newSim(t, simConfig{instances: 1, shared: 5, reserved: 100})
	r := s.inst[0].r
	var eventAt time.Time
	watching := false
	r.AddListener(func(event string, val int, _ string, _ interface{}) {
		if watching && event == CapacityEvent && val == 100 && eventAt.IsZero() {
			eventAt = s.clock.Now()
		}
	})
	start := s.clock.Now()
	s.giveMe(0, 105)
	s.runFor(0, nil)
	if got := r.Capacity(); got != 105 {
		t.Fatalf("Capacity() = %d, want 105", got)
	}
	watching = true
	s.runFor(time.Second, nil)
	s.outage(time.Minute, true)
	// Acquired at the start and never renewed: they count until 13 s.
	fall := start.Add(DefaultLeaseDuration - 2*time.Second)
	for eventAt.IsZero() && s.clock.Now().Sub(start) < 40*time.Second {
		s.runFor(10*time.Millisecond, nil)
		if s.clock.Now().Before(fall) && r.Capacity() != 105 {
			t.Fatalf("at %v Capacity() = %d, want 105 until %v", s.clock.Now().Sub(start), r.Capacity(), fall.Sub(start))
		}
	}
	if got := r.Capacity(); got != 100 {
		t.Fatalf("Capacity() = %d after the leases stopped counting, want 100", got)
	}
	if eventAt.IsZero() {
		t.Fatal("no capacity event of 100 within 40 s")
	}
	lag := eventAt.Sub(fall)
	t.Logf("the leases stopped counting at %v, the event came at %v (%v later; call timeout %v)", fall.Sub(start), eventAt.Sub(start), lag, r.callTimeout())
	if lag < 0 || lag > r.callTimeout() {
		t.Fatalf("the capacity event came %v after the leases stopped counting, want within one call timeout (%v)", lag, r.callTimeout())
	}
}
