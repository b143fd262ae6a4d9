package redislimit_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/internal/redistest"
	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/redislimit"
)

// holderEnv makes the test binary a holder process (holderMain) instead
// of running the tests: "addr|prefix|lease|policy".
const holderEnv = "REDISLIMIT_TEST_HOLDER"

// holderPolicies are the policies a holder process decides on, by name.
var holderPolicies = map[string]limit.Policy{
	// Refills one unit an hour: nothing drains during a test, so every
	// unit is accounted for exactly.
	"slow": limit.TokenBucket(1000, limit.PerHour(1)).Named("slow"),
	// Refills in 2s: the units a dead holder took come back.
	"fast": limit.TokenBucket(100, limit.PerSecond(50)).Named("fast"),
}

// holderMain is a store with allowances in a process of its own: for each
// line "allow N" on stdin it decides cost 1 on key "k" N times and writes
// "admitted A held H errors E", H the units its allowances hold unspent.
func holderMain() int {
	spec := strings.Split(os.Getenv(holderEnv), "|")
	if len(spec) != 4 {
		fmt.Fprintf(os.Stderr, "%s: want addr|prefix|lease|policy\n", holderEnv)
		return 2
	}
	lease, err := time.ParseDuration(spec[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	c := redis.NewClient(&redis.Options{Addr: spec[0]})
	defer c.Close()
	s, err := redislimit.New(c, redislimit.Options{Prefix: spec[1], LocalAllowance: true, AllowanceLease: lease})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	p := holderPolicies[spec[3]]
	s.MakeHotForTest("k", p)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		n, _ := strconv.Atoi(strings.TrimPrefix(in.Text(), "allow "))
		var admitted, errs int
		for range n {
			dec, err := s.AllowN(context.Background(), "k", p, 1)
			switch {
			case err != nil:
				errs++
			case dec.Allowed:
				admitted++
			}
		}
		s.WaitSettledForTest()
		fmt.Printf("admitted %d held %d errors %d\n", admitted, s.HeldUnitsForTest(), errs)
	}
	_ = s.Close(context.Background())
	return 0
}

// holderProc is a running holder process.
type holderProc struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	done  chan struct{}
}

// startHolder starts a holder process on the server at addr, killed at
// cleanup.
func startHolder(t *testing.T, addr, prefix string, lease time.Duration, policy string) *holderProc {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%v|%s", holderEnv, addr, prefix, lease, policy))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the holder process: %v", err)
	}
	h := &holderProc{cmd: cmd, in: in, lines: make(chan string, 16), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-h.done
		_ = cmd.Wait()
	})
	return h
}

// allow has the holder decide n times and returns what it admitted and
// holds.
func (h *holderProc) allow(t *testing.T, n int) (admitted, held int64) {
	t.Helper()
	if _, err := fmt.Fprintf(h.in, "allow %d\n", n); err != nil {
		t.Fatal(err)
	}
	select {
	case line := <-h.lines:
		var errs int64
		if _, err := fmt.Sscanf(line, "admitted %d held %d errors %d", &admitted, &held, &errs); err != nil {
			t.Fatalf("holder answered %q: %v", line, err)
		}
		if errs != 0 {
			t.Fatalf("holder: %d decisions failed", errs)
		}
		return admitted, held
	case <-time.After(30 * time.Second):
		t.Fatal("no answer from the holder process within 30s")
	}
	return 0, 0
}

func (h *holderProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(h.cmd.Process.Pid, sig); err != nil {
		t.Fatalf("signal %v to the holder: %v", sig, err)
	}
}

// holderSetup starts a server, a holder process that takes an allowance on
// "k", and returns the server, a store with allowances and a one-trip
// store in this process, with what the holder admitted and holds.
func holderSetup(t *testing.T, lease time.Duration, policy string) (*holderProc, *redislimit.Store, *redislimit.Store, int64, int64) {
	t.Helper()
	srv := redistest.StartServer(t)
	h := startHolder(t, srv.Addr(), "h:", lease, policy)
	admitted, held := h.allow(t, 50)
	if held == 0 {
		t.Fatal("the holder process holds nothing: the test needs it to hold units")
	}
	mine, err := redislimit.New(srv.Client(t), redislimit.Options{Prefix: "h:", LocalAllowance: true,
		AllowanceLease: lease})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mine.Close(context.Background()) })
	mine.MakeHotForTest("k", holderPolicies[policy])
	one, err := redislimit.New(srv.Client(t), redislimit.Options{Prefix: "h:"})
	if err != nil {
		t.Fatal(err)
	}
	return h, mine, one, admitted, held
}

// TestAllowanceHolderProcessKilled: a process holding an allowance is
// killed (SIGKILL). The others go on at once; the units it held are lost,
// exactly those, and, charged at its lease's end, drain back at the
// bucket's rate.
func TestAllowanceHolderProcessKilled(t *testing.T) {
	const leaseFor = time.Second
	t.Run("loss", func(t *testing.T) {
		h, mine, one, c1, held := holderSetup(t, leaseFor, "slow")
		p := holderPolicies["slow"]
		m1 := drainN2(t, mine, p, 50)
		h.signal(t, syscall.SIGKILL)
		killed := time.Now()
		if err := mine.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		d1 := drain(t, one, "k", p)
		during := time.Since(killed)
		time.Sleep(time.Until(killed.Add(leaseFor + 200*time.Millisecond)))
		d2 := drain(t, one, "k", p)
		lost := p.Limit - c1 - m1 - d1 - d2
		t.Logf("killed holder held %d: admitted %d (holder) + %d (this process) + %d (one-trip, %v after the kill) + %d (after its lease) of %d: lost %d",
			held, c1, m1, d1, during.Round(time.Millisecond), d2, p.Limit, lost)
		if lost != held || d2 != 0 {
			t.Fatalf("lost %d, want exactly the %d units the killed holder held; %d came back after its lease, want 0 (charged)",
				lost, held, d2)
		}
	})
	t.Run("recovery", func(t *testing.T) {
		h, _, one, c1, held := holderSetup(t, leaseFor, "fast")
		p := holderPolicies["fast"]
		h.signal(t, syscall.SIGKILL)
		killed := time.Now()
		// Full again once the lease has ended and its charge has drained.
		bound := leaseFor + time.Duration(p.Limit)*p.Rate.Period/time.Duration(p.Rate.Count) + 3*time.Second
		for {
			dec, err := one.AllowN(context.Background(), "k", p, 0)
			if err != nil {
				t.Fatal(err)
			}
			if dec.Remaining == p.Limit {
				break
			}
			if time.Since(killed) > bound {
				t.Fatalf("not back to the limit %d within %v of the kill: %d", p.Limit, bound, dec.Remaining)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("killed holder admitted %d and held %d of %d (refill %d per %v, lease %v): all back %v after the kill",
			c1, held, p.Limit, p.Rate.Count, p.Rate.Period, leaseFor, time.Since(killed).Round(time.Millisecond))
	})
}

// TestAllowanceHolderProcessFrozen: a process holding an allowance is
// stopped (SIGSTOP). The others go on at once; its lease ends and its units
// are charged; resumed (SIGCONT) past its lease, it spends none of the
// units it held: nothing is admitted twice.
func TestAllowanceHolderProcessFrozen(t *testing.T) {
	const leaseFor = time.Second
	h, mine, one, c1, held := holderSetup(t, leaseFor, "slow")
	p := holderPolicies["slow"]
	h.signal(t, syscall.SIGSTOP)
	stopped := time.Now()
	m1 := drainN2(t, mine, p, 50)
	if err := mine.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	d1 := drain(t, one, "k", p)
	during := time.Since(stopped)
	time.Sleep(time.Until(stopped.Add(leaseFor + 200*time.Millisecond)))
	d2 := drain(t, one, "k", p)
	h.signal(t, syscall.SIGCONT)
	c2, _ := h.allow(t, 2*int(held))
	total := c1 + m1 + d1 + d2 + c2
	t.Logf("frozen holder held %d: admitted %d (holder) + %d (this process) + %d (one-trip, %v after the stop) + %d (after its lease) + %d (holder, resumed) of %d",
		held, c1, m1, d1, during.Round(time.Millisecond), d2, c2, p.Limit)
	if total > p.Limit {
		t.Fatalf("admitted %d in all, over the limit %d: the resumed holder spent stale units", total, p.Limit)
	}
	if lost := p.Limit - total; lost != held {
		t.Fatalf("lost %d, want exactly the %d units the frozen holder held", lost, held)
	}
}

// drainN2 decides cost 1 on "k" n times from s under p and returns how
// many were allowed.
func drainN2(t *testing.T, s *redislimit.Store, p limit.Policy, n int) int64 {
	t.Helper()
	return drainN(t, s, p, int64(n))
}
