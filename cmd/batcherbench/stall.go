package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/costwise/batcher"
)

// The stall scenario runs this program again as a child process
// (stallChildArg) holding a Batcher with a long backlog, which prints each
// release with its time; the parent stops it with SIGSTOP, as a paused VM
// or a CPU-starved container would be, resumes it, and measures the largest
// cost released in any one-second window.

const (
	stallChildArg = "--stall-child"
	stallCapacity = 1000 // cost per second
	stallCost     = 7
	stallFlush    = 100 * time.Millisecond
)

// runStallChild is the child: it releases a backlog at stallCapacity and
// prints "R <unix ns> <cost>" per batch until stdin closes.
func runStallChild(stdout io.Writer) int {
	var mu sync.Mutex
	out := bufio.NewWriter(stdout)
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
	b := batcher.New(100_000).WithRateLimiter(batcher.NewProvisionedResource(stallCapacity)).WithFlushInterval(stallFlush)
	for i := 0; i < 90*stallCapacity/stallCost; i++ { // 90 s of backlog
		if err := b.Enqueue(batcher.NewOperation(w, stallCost, nil, true)); err != nil {
			fmt.Fprintln(os.Stderr, "stall child:", err)
			return 1
		}
	}
	if err := b.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "stall child:", err)
		return 1
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	b.Stop()
	return 0
}

// stallRelease is one batch the child released.
type stallRelease struct {
	at   time.Time
	cost int
}

// stall runs the child for 2 s, stops it for each length in turn with 3 s
// of running between, and reports the worst one-second window after each
// resume.
func (b *bench) stall(ctx context.Context) {
	stops := []time.Duration{3 * time.Second, 8 * time.Second}
	if b.opts.quick {
		stops = stops[:1]
	}
	rels, resumed, err := runStalledChild(ctx, stops)
	if err != nil {
		b.rep.add(result{Scenario: "stall", Case: "child process stopped by SIGSTOP", Status: statusError, Note: err.Error()})
		return
	}
	bound := stallCapacity + int(stallCapacity*stallFlush/time.Second) + stallCost
	for i, d := range stops {
		from, to := resumed[i].Add(-time.Second), resumed[i].Add(3*time.Second)
		worst, after := worstWindow(rels, from, to)
		b.rep.add(result{
			Scenario: "stall", Case: fmt.Sprintf("process stopped %v by SIGSTOP with a backlog, capacity %d/s, flush %v: worst 1-s window after it", d, stallCapacity, stallFlush),
			Ours:   fmt.Sprintf("%d cost (%.3f× capacity); %d cost/s in the 3 s after", worst, float64(worst)/stallCapacity, after/3),
			Goal:   fmt.Sprintf("≤ capacity + one interval + one op = %d", bound),
			Status: verdict(worst <= bound && after > 0),
			Values: map[string]float64{"stop_s": d.Seconds(), "worst_window_cost": float64(worst), "bound": float64(bound), "cost_per_s_after": float64(after) / 3},
			Note:   "before the catch-up bound, a 4 s stop released 5× the capacity in the next second",
		})
		b.logf("stall %v: worst window %d (bound %d)", d, worst, bound)
	}
}

// runStalledChild starts the child, stops and resumes it as stops says, and
// returns its releases, sorted, and when each stop ended.
func runStalledChild(ctx context.Context, stops []time.Duration) ([]stallRelease, []time.Time, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.CommandContext(ctx, exe, stallChildArg)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	var rels []stallRelease
	read := make(chan struct{})
	go func() { defer close(read); rels = readReleases(stdout) }()
	var resumed []time.Time
	sleep := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	sleep(2 * time.Second)
	for _, d := range stops {
		if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			break
		}
		sleep(d)
		_ = cmd.Process.Signal(syscall.SIGCONT)
		resumed = append(resumed, time.Now())
		sleep(3 * time.Second)
	}
	stdin.Close()
	<-read
	if err := cmd.Wait(); err != nil {
		return nil, nil, fmt.Errorf("stall child: %w", err)
	}
	if len(resumed) != len(stops) || ctx.Err() != nil {
		return nil, nil, fmt.Errorf("stall child: interrupted")
	}
	sort.Slice(rels, func(i, j int) bool { return rels[i].at.Before(rels[j].at) })
	return rels, resumed, nil
}

// readReleases parses the child's release lines.
func readReleases(r io.Reader) []stallRelease {
	var rels []stallRelease
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[0] != "R" {
			continue
		}
		ns, err1 := strconv.ParseInt(f[1], 10, 64)
		cost, err2 := strconv.Atoi(f[2])
		if err1 == nil && err2 == nil {
			rels = append(rels, stallRelease{time.Unix(0, ns), cost})
		}
	}
	return rels
}

// worstWindow returns the largest cost released in a one-second window
// starting in [from, to), and the cost released in the 3 s after from+1s.
func worstWindow(rels []stallRelease, from, to time.Time) (worst, after int) {
	for i := range rels {
		if rels[i].at.Before(from) || !rels[i].at.Before(to) {
			continue
		}
		sum := 0
		for j := i; j < len(rels) && rels[j].at.Sub(rels[i].at) < time.Second; j++ {
			sum += rels[j].cost
		}
		worst = max(worst, sum)
		if rels[i].at.After(from.Add(time.Second)) && rels[i].at.Before(from.Add(4*time.Second)) {
			after += rels[i].cost
		}
	}
	return worst, after
}
