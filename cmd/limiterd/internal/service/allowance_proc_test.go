package service

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/costwise/batcher/internal/redistest"
)

// The tests of this file run three limiterd processes, built with go build,
// on one redis-server, and check local allowances' promise: what the three
// admit together on a key, in its window, never exceeds the limit, and
// comes close to it.

// built is the command built by buildLimiterd, once per test binary, in a
// directory TestMain removes.
var built struct {
	once     sync.Once
	dir, bin string
	err      error
}

// buildLimiterd builds the command with go build, once for the tests of
// the run.
func buildLimiterd(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "limiterd-build"); built.err != nil {
			return
		}
		bin := filepath.Join(built.dir, "limiterd")
		out, err := exec.Command("go", "build", "-o", bin, "github.com/costwise/batcher/cmd/limiterd").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build: %v: %s", err, out)
			return
		}
		built.bin = bin
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// removeBuilt removes what buildLimiterd built.
func removeBuilt() {
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
}

// child is a limiterd process a test started.
type child struct {
	cmd        *exec.Cmd
	stderr     *syncBuffer
	http, grpc string
	holder     string // its allowance holder in the ledgers
	exited     chan struct{}
}

// startChild runs bin with config and the rules in dir (none when empty),
// and waits for its start line.
func startChild(t *testing.T, bin, config, rules string) *child {
	t.Helper()
	args := []string{"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--metrics-addr", "", "--log-format", "json",
		"--config", writeFile(t, t.TempDir(), "limiterd.yaml", config)}
	if rules != "" {
		args = append(args, "--rules", rules)
	}
	c := &child{cmd: exec.Command(bin, args...), stderr: &syncBuffer{}, exited: make(chan struct{})}
	c.cmd.Stderr = c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.cmd.Wait(); close(c.exited) }()
	t.Cleanup(func() { c.stop(t) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, line := range strings.Split(c.stderr.String(), "\n") {
			if !strings.Contains(line, "limiterd started") {
				continue
			}
			var addrs struct {
				HTTP, GRPC string
				Holder     string `json:"allowance_holder"`
			}
			if err := json.Unmarshal([]byte(line), &addrs); err != nil {
				t.Fatalf("start line %q: %v", line, err)
			}
			c.http, c.grpc, c.holder = addrs.HTTP, addrs.GRPC, addrs.Holder
			return c
		}
		select {
		case <-c.exited:
			t.Fatalf("limiterd exited: %s", c.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("limiterd did not start within 30 s: %s", c.stderr.String())
		}
	}
}

// stop sends SIGTERM and waits for the exit, killing the process after 15 s.
func (c *child) stop(t *testing.T) {
	select {
	case <-c.exited:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(15 * time.Second):
		t.Errorf("limiterd did not stop within 15 s: %s", c.stderr.String())
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// kill ends the process with SIGKILL: nothing is given back.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	<-c.exited
}

// commandsSinceReset is the server's count of commands run since the last
// CONFIG RESETSTAT, the commands scripts run included, and of script calls.
func commandsSinceReset(t *testing.T, c *redis.Client) (all, scripts int64) {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || name == "cmdstat_info" || strings.HasPrefix(name, "cmdstat_config") {
			continue
		}
		n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		all += n
		if strings.HasPrefix(name, "cmdstat_eval") {
			scripts += n
		}
	}
	return all, scripts
}

// tally counts one process's decisions on the test's keys.
type tally struct {
	mu       sync.Mutex
	admitted map[string]int64
	denied   atomic.Int64
	hotRun   atomic.Int64 // denials on the hot key in a row
	calls    atomic.Int64
	lastErr  atomic.Value // the error that ended a caller
}

func newTally() *tally { return &tally{admitted: map[string]int64{}} }

func (t *tally) record(key string, ok bool, hot bool) {
	t.calls.Add(1)
	if ok {
		t.mu.Lock()
		t.admitted[key]++
		t.mu.Unlock()
		if hot {
			t.hotRun.Store(0)
		}
		return
	}
	t.denied.Add(1)
	if hot {
		t.hotRun.Add(1)
	}
}

func (t *tally) get(key string) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.admitted[key]
}

// load drives callers goroutines per process until stop closes or a call
// fails (the process died): each caller sends, in turn, a decision on the
// hot key and one on one of spread keys.
func load(procs []*child, tallies []*tally, callers, spread int, stop chan struct{}, decide func(p *child, key string) (bool, error)) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i, p := range procs {
		for j := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					key, hot := "hot", n%2 == 0
					if !hot {
						key = "s" + strconv.Itoa((j+n*7+i)%spread)
					}
					ok, err := decide(p, key)
					if err != nil {
						tallies[i].lastErr.Store(err.Error())
						return
					}
					tallies[i].record(key, ok, hot)
				}
			}()
		}
	}
	return &wg
}

// saturated waits until the processes in alive have made at least calls
// decisions together and each has refused the hot key run times in a row,
// or within runs out; it then says why not.
func saturated(tallies []*tally, alive []int, calls, run int64, within time.Duration) (bool, string) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		all := true
		var n int64
		for _, i := range alive {
			all = all && tallies[i].hotRun.Load() >= run
			n += tallies[i].calls.Load()
		}
		if all && n >= calls {
			return true, ""
		}
		time.Sleep(20 * time.Millisecond)
	}
	var why []string
	for _, i := range alive {
		tl := tallies[i]
		w := fmt.Sprintf("process %d: %d calls, %d denied, hot admitted %d, hot refused %d in a row",
			i, tl.calls.Load(), tl.denied.Load(), tl.get("hot"), tl.hotRun.Load())
		if e := tl.lastErr.Load(); e != nil {
			w += fmt.Sprintf(", a caller stopped on %v", e)
		}
		why = append(why, w)
	}
	return false, strings.Join(why, "; ")
}

const allowanceEnvoyRules = `
domain: gw
descriptors:
  - key: k
    value: hot
    rate_limit: {unit: hour, requests_per_unit: 1500}
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 60}
`

// envoyDecider asks one process's Envoy API over gRPC.
func envoyDecider(t *testing.T, procs []*child) func(p *child, key string) (bool, error) {
	clients := map[*child]rlsv3.RateLimitServiceClient{}
	for _, p := range procs {
		clients[p] = rlsv3.NewRateLimitServiceClient(dial(t, p.grpc))
	}
	return func(p *child, key string) (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := clients[p].ShouldRateLimit(ctx, envoyReq("k", key))
		if err != nil {
			return false, err
		}
		return resp.OverallCode == rlsv3.RateLimitResponse_OK, nil
	}
}

// restDecider asks one process's POST /limit.
func restDecider(procs []*child) func(p *child, key string) (bool, error) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	return func(p *child, key string) (bool, error) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+p.http+"/limit", nil)
		req.Header.Set("X-Client-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			return true, nil
		case http.StatusTooManyRequests:
			return false, nil
		}
		return false, fmt.Errorf("POST /limit: %d", resp.StatusCode)
	}
}

const (
	procCallers = 16
	procSpread  = 10
	hotRun      = 200 // hot denials in a row that show a process has spent its units
)

// TestAllowancesThreeProcesses runs the Envoy API and POST /limit on three
// limiterd processes sharing one Redis, with allowances off and on, many
// callers on one hot key and on a spread of keys, until the hot key is
// refused everywhere and has seen ten times its limit in calls.
func TestAllowancesThreeProcesses(t *testing.T) {
	bin := buildLimiterd(t)
	for _, api := range []string{"envoy", "rest"} {
		for _, on := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/allowance=%v", api, on), func(t *testing.T) {
				srv := redistest.StartServer(t)
				admin := srv.Client(t)
				redisConfig := fmt.Sprintf("store: redis\nbackends:\n  redis: {addr: %q, local_allowance: %v}\n", srv.Addr(), on)
				var procs []*child
				var limits func(key string, elapsed time.Duration) int64
				switch api {
				case "envoy":
					dir := t.TempDir()
					writeFile(t, dir, "ex.yaml", allowanceEnvoyRules)
					for range 3 {
						procs = append(procs, startChild(t, bin, redisConfig, dir))
					}
					redistest.AwayFromWindowEdge(time.Hour, time.Minute)
					limits = func(key string, _ time.Duration) int64 {
						if key == "hot" {
							return 1500
						}
						return 60
					}
				case "rest":
					config := redisConfig + "use_algo: token_bucket\nalgo_settings: {capacity: 1500, rate: 1}\n"
					for range 3 {
						procs = append(procs, startChild(t, bin, config, ""))
					}
					// A bucket of 1500 refilled at 1 per second admits at most
					// 1500 + 1 per second of the run.
					limits = func(_ string, elapsed time.Duration) int64 { return 1500 + int64(elapsed/time.Second) + 1 }
				}
				decide := envoyDecider(t, procs)
				if api == "rest" {
					decide = restDecider(procs)
				}
				if err := admin.ConfigResetStat(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
				tallies := []*tally{newTally(), newTally(), newTally()}
				stop := make(chan struct{})
				began := time.Now()
				wg := load(procs, tallies, procCallers, procSpread, stop, decide)
				ok, why := saturated(tallies, []int{0, 1, 2}, 2*10*1500, hotRun, 60*time.Second)
				close(stop)
				wg.Wait()
				elapsed := time.Since(began)
				if !ok {
					t.Fatalf("the hot key was not refused %d times in a row at every process within 60 s: %s", hotRun, why)
				}
				all, scripts := commandsSinceReset(t, admin)
				var calls int64
				for _, tl := range tallies {
					calls += tl.calls.Load()
				}
				report := checkAdmitted(t, tallies, limits, elapsed)
				t.Logf("%s, allowance %v: %d decisions in %v; Redis: %d commands (%.4f per decision), %d script calls (%.4f per decision); %s",
					api, on, calls, elapsed.Round(time.Millisecond), all, float64(all)/float64(calls), scripts, float64(scripts)/float64(calls), report)
			})
		}
	}
}

// checkAdmitted fails the test when what the three admitted on a key
// exceeds its limit, and describes how close they came.
func checkAdmitted(t *testing.T, tallies []*tally, limits func(string, time.Duration) int64, elapsed time.Duration) string {
	t.Helper()
	keys := []string{"hot"}
	for i := range procSpread {
		keys = append(keys, "s"+strconv.Itoa(i))
	}
	var spreadGot, spreadLimit int64
	var hot string
	for _, k := range keys {
		var got int64
		for _, tl := range tallies {
			got += tl.get(k)
		}
		l := limits(k, elapsed)
		if got > l {
			t.Errorf("key %s: %d admitted across the processes, over its limit %d", k, got, l)
		}
		if k == "hot" {
			hot = fmt.Sprintf("hot key admitted %d of %d (%.4f)", got, l, float64(got)/float64(l))
			continue
		}
		spreadGot, spreadLimit = spreadGot+got, spreadLimit+l
	}
	return fmt.Sprintf("%s; spread keys admitted %d of %d (%.4f)", hot, spreadGot, spreadLimit, float64(spreadGot)/float64(spreadLimit))
}

// TestAllowanceProcessKilled kills one of three limiterd processes with
// SIGKILL while it holds units of the hot key: the other two go on, and
// what the three admit in the window is the limit less at most what the
// dead one held.
func TestAllowanceProcessKilled(t *testing.T) {
	procs, _, admin := startAllowanceProcs(t)
	redistest.AwayFromWindowEdge(time.Hour, time.Minute)
	tallies := []*tally{newTally(), newTally(), newTally()}
	stop := make(chan struct{})
	wg := load(procs, tallies, procCallers, procSpread, stop, envoyDecider(t, procs))
	// Kill the third once the hot key is a third spent and it decides
	// from an allowance.
	waitHot(t, tallies, 500, stop, wg)
	procs[2].kill()
	atKill := tallies[0].get("hot") + tallies[1].get("hot")
	ok, why := saturated(tallies, []int{0, 1}, 0, hotRun, 60*time.Second)
	close(stop)
	wg.Wait()
	if !ok {
		t.Fatalf("the hot key was not refused %d times in a row by the two left within 60 s: %s", hotRun, why)
	}
	got := tallies[0].get("hot") + tallies[1].get("hot") + tallies[2].get("hot")
	if after := tallies[0].get("hot") + tallies[1].get("hot") - atKill; after == 0 {
		t.Error("nothing admitted on the hot key after the kill")
	}
	// The ledger beside the counter holds, per process, the units lent to
	// it in the window and not given back: the dead one's entry bounds what
	// it took with it.
	dead, held, found := ledgerEntry(t, admin, procs[2].holder)
	if procs[2].holder == "" || !found {
		t.Fatalf("no ledger entry of the killed process (holder %q): %v", procs[2].holder, held)
	}
	loss := 1500 - got
	t.Logf("hot key admitted %d of 1500 across the three (%d by the killed one, %d by the two after the kill); lost %d, the killed one's ledger entry %d units (ledger %v)",
		got, tallies[2].get("hot"), tallies[0].get("hot")+tallies[1].get("hot")-atKill, loss, dead, held)
	if got > 1500 {
		t.Errorf("admitted %d, over the limit 1500", got)
	}
	if loss > dead {
		t.Errorf("lost %d units, more than the killed process was lent (%d)", loss, dead)
	}
}

// TestAllowanceProcessFrozen: a limiterd process stopped with SIGSTOP while
// it holds units of the hot key takes at most those units out of the limit
// while it is frozen (the other two saturate the key without it), and once
// resumed spends at most what it held: across the three, never more than
// the limit.
func TestAllowanceProcessFrozen(t *testing.T) {
	procs, _, admin := startAllowanceProcs(t)
	frozen := procs[2]
	t.Cleanup(func() { _ = frozen.cmd.Process.Signal(syscall.SIGCONT) }) // before its stop
	redistest.AwayFromWindowEdge(time.Hour, time.Minute)
	tallies := []*tally{newTally(), newTally(), newTally()}
	hot := func() int64 { return tallies[0].get("hot") + tallies[1].get("hot") + tallies[2].get("hot") }
	stop := make(chan struct{})
	wg := load(procs, tallies, procCallers, procSpread, stop, envoyDecider(t, procs))
	waitHot(t, tallies, 500, stop, wg)
	if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ok, why := saturated(tallies, []int{0, 1}, 0, hotRun, 60*time.Second)
	// What the frozen one holds now, by the ledger beside the counter.
	frozenHeld, _, _ := ledgerEntry(t, admin, frozen.holder)
	// No call is sent from here on; the frozen one's calls in flight end
	// once it resumes, so the tallies then hold every admission made up to
	// the freeze and none after.
	close(stop)
	if err := frozen.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	whileFrozen := hot()
	if !ok {
		t.Fatalf("the hot key was not refused %d times in a row by the two running within 60 s: %s", hotRun, why)
	}
	if loss := 1500 - whileFrozen; loss > frozenHeld {
		t.Errorf("while frozen, %d units of the limit were out of reach, more than the frozen process held (%d)", loss, frozenHeld)
	}
	// Resumed, it spends what it held, and no more.
	stop = make(chan struct{})
	again := []*tally{newTally(), newTally(), newTally()}
	wg = load(procs, again, procCallers, procSpread, stop, envoyDecider(t, procs))
	ok, why = saturated(again, []int{0, 1, 2}, 0, hotRun, 60*time.Second)
	close(stop)
	wg.Wait()
	if !ok {
		t.Fatalf("after the resume the hot key was not refused %d times in a row by all three within 60 s: %s", hotRun, why)
	}
	total := whileFrozen + again[0].get("hot") + again[1].get("hot") + again[2].get("hot")
	t.Logf("hot key: %d of 1500 admitted while the third was frozen holding %d; %d after it resumed (%d by it); %d in all",
		whileFrozen, frozenHeld, total-whileFrozen, again[2].get("hot"), total)
	if total > 1500 {
		t.Errorf("admitted %d, over the limit 1500", total)
	}
}

// startAllowanceProcs starts three limiterd processes with local
// allowances on the Envoy rules of allowanceEnvoyRules, on a redis-server
// of their own, and returns them with the server and a client of it.
func startAllowanceProcs(t *testing.T) ([]*child, *redistest.Server, *redis.Client) {
	t.Helper()
	bin := buildLimiterd(t)
	srv := redistest.StartServer(t)
	dir := t.TempDir()
	writeFile(t, dir, "ex.yaml", allowanceEnvoyRules)
	config := fmt.Sprintf("store: redis\nbackends:\n  redis: {addr: %q, local_allowance: true}\n", srv.Addr())
	var procs []*child
	for range 3 {
		procs = append(procs, startChild(t, bin, config, dir))
	}
	return procs, srv, srv.Client(t)
}

// waitHot waits until the three have admitted n on the hot key, stopping
// the load and failing the test after 30 s.
func waitHot(t *testing.T, tallies []*tally, n int64, stop chan struct{}, wg *sync.WaitGroup) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for tallies[0].get("hot")+tallies[1].get("hot")+tallies[2].get("hot") < n {
		if time.Now().After(deadline) {
			close(stop)
			wg.Wait()
			t.Fatalf("the hot key did not reach %d admissions within 30 s", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ledgerEntry reads the hot key's ledger: the units lent to holder in the
// window and not given back, the whole ledger, and whether holder has an
// entry.
func ledgerEntry(t *testing.T, admin *redis.Client, holder string) (int64, map[string]string, bool) {
	t.Helper()
	ctx := context.Background()
	ledgers, err := admin.Keys(ctx, "{gw_k_hot_*}.lent").Result()
	if err != nil || len(ledgers) != 1 {
		t.Fatalf("ledgers %v, %v: want one", ledgers, err)
	}
	held, err := admin.HGetAll(ctx, ledgers[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	entry, ok := held[holder]
	if !ok {
		return 0, held, false
	}
	n, _ := strconv.ParseInt(entry[:strings.IndexByte(entry, ':')], 10, 64)
	return n, held, true
}
