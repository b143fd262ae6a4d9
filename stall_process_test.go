package batcher_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/costwise/batcher"
)

// The stall test with a real process: the test binary runs itself as a
// child (TestStallChild, which does nothing unless stallChildEnv is set)
// holding a batcher with a long backlog, and prints every release with its
// time. The parent stops the child with SIGSTOP, as a paused VM, a debugger
// or a CPU-starved container would, then resumes it.

const (
	stallChildEnv      = "BATCHER_STALL_CHILD"
	stallCapacity      = 1000 // per second
	stallCost          = 7
	stallFlushInterval = 100 * time.Millisecond
)

// TestStallChild is the child process of TestStallReleasesNoBurstProcess.
func TestStallChild(t *testing.T) {
	if os.Getenv(stallChildEnv) != "1" {
		t.Skip("run by TestStallReleasesNoBurstProcess as its child process")
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	w := batcher.NewWatcher(func(ops []batcher.IOperation) {
		cost := 0
		for _, op := range ops {
			cost += int(op.Cost())
		}
		mu.Lock()
		fmt.Fprintf(out, "R %d %d\n", time.Now().UnixNano(), cost)
		out.Flush()
		mu.Unlock()
	}).WithMaxBatchSize(10)
	b := batcher.New(100000).WithRateLimiter(batcher.NewProvisionedResource(stallCapacity)).
		WithFlushInterval(stallFlushInterval)
	for i := 0; i < 60*stallCapacity/stallCost; i++ { // a minute of backlog
		if err := b.Enqueue(batcher.NewOperation(w, stallCost, nil, true)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it
	b.Stop()
}

// release is one batch the child released: when, by its clock, and its cost.
type release struct {
	at   time.Time
	cost int
}

// TestStallReleasesNoBurstProcess runs the child with a backlog for 1.5 s,
// stops it with SIGSTOP for 3 s, resumes it for 2.5 s, and checks that no
// one-second window saw more than the capacity plus one flush interval's
// worth plus one operation: the stall is not made up in a burst.
func TestStallReleasesNoBurstProcess(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGSTOP")
	}
	if testing.Short() {
		t.Skip("runs a child process for 7 s")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestStallChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), stallChildEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var rels []release
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 3 || f[0] != "R" {
				continue
			}
			ns, err1 := strconv.ParseInt(f[1], 10, 64)
			cost, err2 := strconv.Atoi(f[2])
			if err1 == nil && err2 == nil {
				mu.Lock()
				rels = append(rels, release{time.Unix(0, ns), cost})
				mu.Unlock()
			}
		}
	}()
	time.Sleep(1500 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stoppedAt := time.Now()
	time.Sleep(3 * time.Second)
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumedAt := time.Now()
	time.Sleep(2500 * time.Millisecond)
	stdin.Close()
	<-read
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}

	mu.Lock()
	defer mu.Unlock()
	sort.Slice(rels, func(i, j int) bool { return rels[i].at.Before(rels[j].at) })
	// The child stamps each release when its callback runs, which a loaded
	// machine delays by a few milliseconds at random; 2 % of the capacity
	// absorbs that. Without the catch-up bound a 3-s stall gives ~3× it.
	bound := stallCapacity + int(stallCapacity*stallFlushInterval/time.Second) + stallCost + stallCapacity/50
	worst, worstAt := maxWindow(rels, time.Second)
	after := 0
	for _, r := range rels {
		if r.at.After(resumedAt) {
			after += r.cost
		}
	}
	t.Logf("%d releases; stopped %v for %v; worst 1-s window %d cost at %v after resuming (bound %d); %d cost in the 2.5 s after",
		len(rels), stoppedAt.Format("15:04:05.000"), resumedAt.Sub(stoppedAt).Round(time.Millisecond),
		worst, worstAt.Sub(resumedAt).Round(time.Millisecond), bound, after)
	if worst > bound {
		t.Fatalf("a one-second window released %d cost, more than %d", worst, bound)
	}
	if after == 0 {
		t.Fatal("nothing released after the child resumed")
	}
}

// maxWindow returns the largest cost released within any window of length
// d, and where that window starts.
func maxWindow(rels []release, d time.Duration) (int, time.Time) {
	best, sum, lo := 0, 0, 0
	var at time.Time
	for hi := range rels {
		sum += rels[hi].cost
		for rels[hi].at.Sub(rels[lo].at) >= d {
			sum -= rels[lo].cost
			lo++
		}
		if sum > best {
			best, at = sum, rels[lo].at
		}
	}
	return best, at
}
