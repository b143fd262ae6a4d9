package redislease_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/redislease"
	"github.com/costwise/batcher/sharing"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// outageCase is one way for the server to go away and come back.
type outageCase struct {
	name string
	down time.Duration
	how  string // "stop": killed and started again with its data; "freeze": SIGSTOP; "wipe": started again empty
	// atRenewal times the outage to begin just before the instances'
	// renewals fall due, so that they come back with leases still valid
	// and renewals overdue.
	atRenewal bool
}

// TestOutageRecovery runs four instances sharing 20,000 in 20 partitions on
// a redis-server of their own, with the defaults (15-s leases, a 500-ms max
// interval) and the go-redis client's defaults, as the README shows them.
// The server is stopped and started again with its data (appendonly,
// fsync always), frozen with SIGSTOP, or started again empty, for 1 to
// 30 s: within 2 s of it answering again the instances count at least
// 90 % of the capacity, on leases the server holds for them, and keep
// counting at least that much. From before the outage to the end the
// instances never count more than the shared capacity between them.
func TestOutageRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("outages of up to 30 s")
	}
	ignore := goleak.IgnoreCurrent()
	t.Run("group", func(t *testing.T) {
		for _, c := range []outageCase{
			{"stopped 1s", time.Second, "stop", false},
			{"stopped 5s", 5 * time.Second, "stop", false},
			{"stopped 30s", 30 * time.Second, "stop", false},
			{"frozen 1s", time.Second, "freeze", false},
			{"frozen 5s", 5 * time.Second, "freeze", false},
			{"frozen 12s", 12 * time.Second, "freeze", false},
			{"frozen 30s", 30 * time.Second, "freeze", false},
			{"restarted empty", 0, "wipe", false},
			{"stopped 1s, restarted empty", time.Second, "wipe", false},
			{"stopped 2.5s across the renewals, restarted empty", 2500 * time.Millisecond, "wipe", true},
		} {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				runOutage(t, c)
			})
		}
	})
	waitNoLeak(t, 10*time.Second, ignore)
}

// waitNoLeak fails the test unless, within limit, no goroutine is left but
// those ignore allows: a call to a frozen server ends at the client's read
// timeout, which no context shortens.
func waitNoLeak(t *testing.T, limit time.Duration, ignore goleak.Option) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for goleak.Find(ignore) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines left %v after the test: %v", limit, goleak.Find(ignore))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func runOutage(t *testing.T, c outageCase) {
	var keep []string
	if c.how == "stop" {
		keep = []string{"--appendonly", "yes", "--appendfsync", "always"}
	}
	srv := redistest.StartServer(t, keep...)
	const shared, factor = 20000, 1000
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var ins []*sharing.Resource
	for i := 0; i < 4; i++ {
		client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		defer client.Close()
		r := redislease.NewSharedResource(client, "outage", shared).WithFactor(factor)
		mustNil(t, r.Provision(ctx))
		mustNil(t, r.Start(ctx))
		defer r.Stop()
		r.GiveMe(shared)
		ins = append(ins, r)
	}
	total := func() uint32 {
		var sum uint32
		for _, r := range ins {
			sum += r.Capacity()
		}
		return sum
	}
	eventually(t, 20*time.Second, "5 partitions each", func() bool {
		for _, r := range ins {
			if r.Capacity() != shared/4 {
				return false
			}
		}
		return true
	})

	// Over-use is sampled from before the outage to the end.
	var most uint32
	var mu sync.Mutex
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			c := total()
			mu.Lock()
			most = max(most, c)
			mu.Unlock()
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	defer func() { close(done); <-sampled }()

	if c.atRenewal {
		waitForRenewals(t, ins)
	}
	outage(t, srv, c)
	answered := time.Now()
	mon := fastClient(srv.Addr())
	defer mon.Close()
	back90, least := time.Duration(-1), uint32(shared)
	firstBack := make([]time.Duration, len(ins)) // when each instance was first seen counting after the answer
	for since := time.Duration(0); since < 6*time.Second; since = time.Since(answered) {
		counted := total()
		for i, r := range ins {
			if firstBack[i] == 0 && r.Capacity() > 0 && since > 0 {
				firstBack[i] = since
			}
		}
		if back90 < 0 && counted >= shared*9/10 {
			if keys, err := mon.Keys(ctx, "{outage}:lease:*").Result(); err == nil && len(keys) >= 18 {
				back90 = since
			}
		}
		if back90 >= 0 {
			least = min(least, counted)
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if back90 >= 0 {
		t.Logf("%s: 90 %% counted and leased %v after the server answered; least counted after that %d; most counted at any time %d of %d; each instance first seen counting after %v",
			c.name, back90.Round(time.Millisecond), least, most, shared, firstBack)
	}
	if most > shared {
		t.Fatalf("%s: the instances counted %d of a shared %d", c.name, most, shared)
	}
	if back90 < 0 || back90 > 2*time.Second || least < shared*9/10 {
		t.Fatalf("%s: 90 %% back after %v (-1ns: not within 6 s), least counted after it %d; want within 2 s of the server answering, and at least %d from then on",
			c.name, back90, least, shared*9/10)
	}
}

// outage takes the server away for c.down as c.how says and returns once
// it answers again. Restart starts the server with the arguments it had,
// so one started with appendonly comes back with its data.
func outage(t *testing.T, srv *redistest.Server, c outageCase) {
	switch c.how {
	case "freeze":
		srv.Freeze(t)
		time.Sleep(c.down)
		srv.Thaw(t)
	case "stop":
		srv.Kill()
		time.Sleep(c.down)
		srv.Restart(t)
		// The scenario is an outage without data loss: the partitions must
		// be there before any instance could provision them again.
		mon := fastClient(srv.Addr())
		defer mon.Close()
		if n, err := mon.Exists(context.Background(), "{outage}:partitions").Result(); err != nil || n != 1 {
			t.Fatalf("the server came back without its data (%d, %v)", n, err)
		}
	case "wipe":
		srv.Kill()
		time.Sleep(c.down)
		srv.Restart(t) // no persistence: empty
	default:
		panic(fmt.Sprintf("unknown outage %q", c.how))
	}
}

// waitForRenewals returns 9.2 s after the first of the instances' renewal
// rounds that follow the call: the leases of an instance are renewed
// together, every two thirds of a 15-s lease (up to 0.75 s early), and
// valid until 13 s after the round, and the instances acquired within a
// second or so of each other, so an outage that begins then catches every
// round that falls due in the next few seconds.
func waitForRenewals(t *testing.T, ins []*sharing.Resource) {
	t.Helper()
	before := make([]uint64, len(ins))
	for i, r := range ins {
		before[i] = r.Stats().Renewals
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		for i, r := range ins {
			if r.Stats().Renewals != before[i] {
				time.Sleep(9200 * time.Millisecond)
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no renewal within 20 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}
