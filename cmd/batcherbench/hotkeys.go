package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/redis/go-redis/v9"
)

// The hotkeys scenario: keyed limits on one Redis shared by worker
// processes, each with its own redislimit.Store, keys drawn Zipf(1.1) over
// 100,000 keys and limits set so that the 100 hottest keys run at their
// limit. In one run it compares today's path (one round trip per decision),
// the same stores with Options.LocalAllowance, and the in-memory store of
// package limit in one process as the latency reference; then one key
// shared by the workers at 10× its limit. Every admission on a limited key
// is checked against its limit (hotcheck.go): a proven over-admission fails
// the scenario.

// hotPlan sizes the scenario.
type hotPlan struct {
	procs, callers int
	keys, hot      int
	zipf           float64
	algorithms     []limit.Algorithm
	calibrate      time.Duration // today's path without binding limits: sets the limits
	warmup         time.Duration // the buckets drain their first burst
	measure        time.Duration
	tick           time.Duration
	oneLimit       int64 // the one-key case: limit per second
	oneDemand      int64 // its demand, decisions per second over every worker
	oneWarmup      time.Duration
	oneMeasure     time.Duration
	oneModes       []string      // the one-key case's store modes
	coldLease      time.Duration // Options.ColdLease of the stores with allowances
	// p99Pairs is how many times the mix's p99 verdict measures the
	// stores with allowances and the memory store, one after the other,
	// in alternating order (on, memory; memory, on; ...), so that a drift
	// of the machine between two runs weighs on both sides alike. The
	// verdict compares the p99s of the pooled runs.
	p99Pairs int
}

func hotPlanFor(quick bool) hotPlan {
	p := hotPlan{procs: 3, callers: 64, keys: 100_000, hot: 100, zipf: 1.1,
		algorithms: []limit.Algorithm{limit.TokenBucketAlgorithm, limit.GCRAAlgorithm, limit.FixedWindowAlgorithm},
		calibrate:  3 * time.Second, warmup: 30 * time.Second, measure: 10 * time.Second, tick: 50 * time.Millisecond,
		oneLimit: 1000, oneDemand: 10_000, oneWarmup: 2 * time.Second, oneMeasure: 10 * time.Second,
		oneModes: []string{modeOff, modeOn}, p99Pairs: 2}
	if quick {
		p.algorithms = p.algorithms[:1]
		p.calibrate, p.warmup, p.measure = time.Second, 1500*time.Millisecond, 2*time.Second
		p.oneWarmup, p.oneMeasure = 1500*time.Millisecond, 2*time.Second
		p.oneModes = []string{modeOn}
		p.p99Pairs = 1
	}
	return p
}

// hotRun is what the workers of one run counted, merged.
type hotRun struct {
	mode                  string
	decisions, admitted   int64
	errors                int64
	firstErr              string
	seconds               float64
	lat, hotLat           []int64
	hotDemand             []int64
	perKey                []*tickCounts // by hot rank
	coldMax               int64         // sum over workers of their largest cold-key admissions
	commands              int64         // Redis commands in the measured time; -1 unknown
	cpu                   float64       // workers' CPU seconds, measured time
	preempted             int64         // workers' involuntary context switches, measured time
	gcCycles              int64         // workers' garbage collections, measured time
	gcCPU                 float64       // the CPU seconds they took
	redisCPU              float64       // redis-server's CPU seconds, measured time; NaN unknown
	closeErr              string
	stats                 map[string]int64 // the stores' AllowanceStats over the measured time, summed
	warmTicks, measureEnd int              // the measured ticks: [warmTicks, measureEnd)
}

func (r *hotRun) rate() float64 { return float64(r.decisions) / r.seconds }

func (r *hotRun) perDecision() float64 {
	if r.commands < 0 || r.decisions == 0 {
		return math.NaN()
	}
	return float64(r.commands) / float64(r.decisions)
}

// hotRedis returns the address of the Redis the scenario uses and a
// function that stops it when the scenario started it. Given an address
// (--hotkeys-redis), it uses that server, whose command counts then include
// any other client's.
func hotRedis(addr string) (string, int, func(), error) {
	if addr != "" {
		return addr, 0, func() {}, nil
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", 0, nil, unavailableError{"redis-server is not in PATH and --hotkeys-redis is not set"}
	}
	for attempt := 0; attempt < 3; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", 0, nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		dir, err := os.MkdirTemp("", "hotkeys-redis")
		if err != nil {
			return "", 0, nil, err
		}
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
			"--appendonly", "no", "--dir", dir)
		if err := cmd.Start(); err != nil {
			os.RemoveAll(dir)
			return "", 0, nil, err
		}
		stop := func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			os.RemoveAll(dir)
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
		deadline := time.Now().Add(10 * time.Second)
		for c.Ping(context.Background()).Err() != nil && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		ok := c.Ping(context.Background()).Err() == nil
		c.Close()
		if ok {
			return addr, cmd.Process.Pid, stop, nil
		}
		stop()
	}
	return "", 0, nil, errors.New("redis-server did not answer PING within 10 s, three times")
}

// redisCommands sums the calls of INFO commandstats (commands run by
// scripts included), less the INFO calls themselves.
func redisCommands(ctx context.Context, c *redis.Client) (int64, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "cmdstat_") || strings.HasPrefix(line, "cmdstat_info:") {
			continue
		}
		if i := strings.Index(line, "calls="); i >= 0 {
			v, _, _ := strings.Cut(line[i+len("calls="):], ",")
			k, _ := strconv.ParseInt(v, 10, 64)
			n += k
		}
	}
	return n, nil
}

// runHotWorkers starts one worker process per config, all starting at the
// same time, reads Redis's command counts over the measured time, and
// merges the workers' results.
func runHotWorkers(ctx context.Context, c *redis.Client, redisPid int, cfgs []hotConfig) (*hotRun, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// Start on a whole second, after the workers have had time to start, so
	// that ticks and fixed windows share their origin.
	start := time.Now().Add(700 * time.Millisecond).Truncate(time.Second).Add(time.Second)
	for i := range cfgs {
		cfgs[i].Start = start.UnixNano()
		if c != nil {
			cfgs[i].Redis = c.Options().Addr
		}
	}
	cfg := cfgs[0]
	results := make([]*hotResult, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i := range cfgs {
		arg, _ := json.Marshal(cfgs[i])
		cmd := exec.CommandContext(ctx, exe, hotChildArg, string(arg))
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cmd.Wait(); err != nil {
				errs[i] = fmt.Errorf("worker %d: %v: %s", i, err, strings.TrimSpace(stderr.String()))
				return
			}
			var r hotResult
			if err := json.Unmarshal(out.Bytes(), &r); err != nil {
				errs[i] = fmt.Errorf("worker %d: %v", i, err)
				return
			}
			results[i] = &r
		}()
	}
	commands, redisCPU := int64(-1), math.NaN()
	if c != nil && cfg.Mode != modeMemory && cfg.Mode != modeMemoryOne {
		sleepUntil(ctx, start.Add(cfg.Warmup))
		before, err1 := redisCommands(ctx, c)
		cpu0, err3 := pidCPU(redisPid)
		sleepUntil(ctx, start.Add(cfg.Warmup+cfg.Measure))
		after, err2 := redisCommands(ctx, c)
		if cpu1, err4 := pidCPU(redisPid); err3 == nil && err4 == nil {
			redisCPU = cpu1 - cpu0
		}
		if err := errors.Join(err1, err2); err != nil {
			fmt.Fprintln(os.Stderr, "hotkeys: INFO commandstats:", err)
		} else {
			commands = after - before - 1 // the second INFO counts itself
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	run := &hotRun{mode: cfg.Mode, commands: commands, redisCPU: redisCPU, seconds: cfg.Measure.Seconds(),
		hotDemand: make([]int64, len(cfg.HotLimits)), perKey: make([]*tickCounts, len(cfg.HotLimits)),
		warmTicks: int(cfg.Warmup / cfg.Tick), measureEnd: int((cfg.Warmup + cfg.Measure) / cfg.Tick)}
	for i := range run.perKey {
		run.perKey[i] = newTickCounts(cfg.ticks())
	}
	for _, r := range results {
		run.decisions += r.Decisions
		run.admitted += r.Admitted
		run.errors += r.Errors
		if run.firstErr == "" {
			run.firstErr = r.FirstError
		}
		if run.closeErr == "" {
			run.closeErr = r.CloseError
		}
		run.cpu += r.CPUSeconds
		run.preempted += r.Preempted
		run.gcCycles += r.GCCycles
		run.gcCPU += r.GCCPUSeconds
		for k, v := range r.StoreStats {
			if run.stats == nil {
				run.stats = map[string]int64{}
			}
			run.stats[k] += v
		}
		run.coldMax += r.ColdMax
		run.lat = addHist(run.lat, r.Latency)
		run.hotLat = addHist(run.hotLat, r.HotLatency)
		for i, n := range r.HotDemand {
			run.hotDemand[i] += n
		}
		for k, n := range r.Certain {
			var rank, t int32
			if _, err := fmt.Sscan(k, &rank, &t); err != nil || int(rank) >= len(run.perKey) {
				return nil, fmt.Errorf("worker result: bad tick %q", k)
			}
			run.perKey[rank].add(t, t, n)
		}
		for k, n := range r.Across {
			var rank, a, b int32
			if _, err := fmt.Sscan(k, &rank, &a, &b); err != nil || int(rank) >= len(run.perKey) {
				return nil, fmt.Errorf("worker result: bad tick span %q", k)
			}
			run.perKey[rank].add(a, b, n)
		}
	}
	return run, nil
}

func sleepUntil(ctx context.Context, t time.Time) {
	select {
	case <-time.After(time.Until(t)):
	case <-ctx.Done():
	}
}

// exactness is the check of one run's admissions against the limits.
type exactness struct {
	keys       int   // limited keys checked
	violations int   // keys with a proven over-admission
	spans      int   // spans (windows) over the limit, all keys
	worst      int64 // largest proven excess, admissions (≤ 0: none)
	coldOK     bool  // the unlimited keys stayed under their limit
}

func checkExact(run *hotRun, cfg hotConfig) exactness {
	ex := exactness{worst: math.MinInt64, coldOK: run.coldMax <= cfg.ColdLimit}
	for rank, tc := range run.perKey {
		l := cfg.HotLimits[rank]
		ex.keys++
		var worst int64
		var spans int
		if cfg.Algorithm == limit.FixedWindowAlgorithm {
			certain, _ := tc.windowCounts(int(time.Second / cfg.Tick))
			worst = math.MinInt64
			for _, c := range certain {
				if c > l {
					spans++
				}
				worst = max(worst, c-l)
			}
		} else {
			worst, spans = tc.bucketExcess(l, l, int64(time.Second), int64(cfg.Tick))
		}
		ex.spans += spans
		ex.worst = max(ex.worst, worst)
		if spans > 0 {
			ex.violations++
		}
	}
	return ex
}

// saturation is admitted ÷ what the limit allows over the measured time,
// on the keys whose demand was at least 1.5× their limit there.
type saturation struct {
	keys  int
	ratio float64 // Σ admitted ÷ Σ allowed
	min   float64
	// minRank is the rank (0: the hottest) of the key admitted least
	// (min), and minDemand its callers' demand ÷ its limit.
	minRank   int
	minDemand float64
	// The one-key case: per 1-s window, the admissions certainly inside it
	// and those dated across its edges (a round trip over the boundary).
	winCertain, winMaybe []int64
}

func saturated(run *hotRun, cfg hotConfig) saturation {
	s := saturation{min: math.Inf(1)}
	var adm, allowed float64
	from, to, secs := run.warmTicks, run.measureEnd, run.seconds
	if cfg.Algorithm == limit.FixedWindowAlgorithm && secs > 1 {
		// A saturated 1-s window admits its limit in its first moments,
		// on the measured span's edges (whole seconds), where the
		// admissions dated across an edge count half: from mid-window to
		// mid-window no window's admissions straddle an edge.
		half := int(time.Second/cfg.Tick) / 2
		from, to, secs = from+half, to-half, secs-1
	}
	for rank, tc := range run.perKey {
		l := float64(cfg.HotLimits[rank])
		if float64(run.hotDemand[rank]) < 1.5*l*run.seconds {
			continue
		}
		c, m := tc.in(from, to)
		a := float64(c) + float64(m)/2 // those across the edges: half in
		s.keys++
		adm += a
		allowed += l * secs
		if r := a / (l * secs); r < s.min {
			s.min, s.minRank = r, rank
			s.minDemand = float64(run.hotDemand[rank]) / (l * run.seconds)
		}
	}
	if s.keys > 0 {
		s.ratio = adm / allowed
	}
	if len(run.perKey) == 1 {
		w := int(time.Second / cfg.Tick)
		for from := run.warmTicks; from+w <= run.measureEnd; from += w {
			c, m := run.perKey[0].in(from, from+w)
			s.winCertain, s.winMaybe = append(s.winCertain, c), append(s.winMaybe, m)
		}
	}
	return s
}

// hotkeys runs the scenario.
func (b *bench) hotkeys(ctx context.Context) {
	hp := hotPlanFor(b.opts.quick)
	if b.opts.hotKeys > 0 {
		hp.keys = b.opts.hotKeys
	}
	hp.coldLease = b.opts.hotCold
	if b.opts.hotWarm > 0 {
		hp.warmup = b.opts.hotWarm
	}
	if b.opts.hotPairs > 0 {
		hp.p99Pairs = b.opts.hotPairs
	}
	if b.opts.hotAlgs != nil {
		hp.algorithms = nil
		for _, a := range b.opts.hotAlgs {
			hp.algorithms = append(hp.algorithms, limit.Algorithm(a))
		}
	}
	addr, redisPid, stop, err := hotRedis(b.opts.hotRedis)
	if err != nil {
		st := statusError
		var un unavailableError
		if errors.As(err, &un) && !b.opts.ci {
			st = statusSkipped
		}
		b.rep.add(result{Scenario: "hotkeys", Case: "(all)", Store: "redis", Status: st, Note: err.Error()})
		return
	}
	defer stop()
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	run := fmt.Sprintf("hk%d", time.Now().UnixNano()%1e9)
	if b.opts.hotOnly != "onekey" {
		b.hotMix(ctx, hp, client, redisPid, run)
	}
	if b.opts.hotOnly != "mix" {
		b.hotOneKey(ctx, hp, client, redisPid, run)
	}
}

// hotMix runs the Zipf mix: calibration, then each algorithm off, on and
// on the memory store.
func (b *bench) hotMix(ctx context.Context, hp hotPlan, client *redis.Client, redisPid int, run string) {
	// Calibration: today's path, no binding limit, to learn each hot key's
	// demand; each then gets half of it as its limit.
	b.logf("hotkeys: calibrating demand (%v)", hp.calibrate)
	cal, err := runHotWorkers(ctx, client, redisPid, hp.configs(modeOff, run+":cal:", limit.TokenBucketAlgorithm, nil, hotColdLimit, hp.calibrate/4, hp.calibrate))
	if err != nil {
		b.rep.add(result{Scenario: "hotkeys", Case: "calibration", Status: statusError, Note: err.Error()})
		return
	}
	limits := make([]int64, hp.hot)
	for i := range limits {
		limits[i] = max(1, int64(0.5*float64(cal.hotDemand[i])/cal.seconds))
	}
	coldLimit := int64(hotColdLimit)
	b.logf("hotkeys: today's path %.0f decisions/s; hot limits %d/s (hottest) to %d/s (100th)", cal.rate(), limits[0], limits[hp.hot-1])

	for _, alg := range hp.algorithms {
		runs := map[string]*hotRun{}
		for _, mode := range []string{modeOff, modeOn, modeMemory, modeMemoryOne} {
			b.logf("hotkeys %s: %s", alg, mode)
			cfgs := hp.configs(mode, fmt.Sprintf("%s:%s:%s:", run, alg, mode), alg, limits, coldLimit, hp.warmup, hp.measure)
			r, err := runHotWorkers(ctx, client, redisPid, cfgs)
			if err != nil {
				b.rep.add(result{Scenario: "hotkeys", Case: fmt.Sprintf("%s, %s", alg, mode), Status: statusError, Note: err.Error()})
				return
			}
			runs[mode] = r
			b.logf("hotkeys %s %s: %.0f decisions/s, %.3f commands per decision, p99 %v", alg, mode, r.rate(), r.perDecision(), histQuantile(r.lat, 0.99))
		}
		// The p99 verdict's further pairs, each in the order opposite to
		// the one before it: memory, on; on, memory; ...
		var more []*hotRun
		for k := 1; k < hp.p99Pairs; k++ {
			order := []string{modeMemory, modeOn}
			if k%2 == 0 {
				order = []string{modeOn, modeMemory}
			}
			for _, mode := range order {
				b.logf("hotkeys %s: %s, p99 pair %d of %d", alg, mode, k+1, hp.p99Pairs)
				cfgs := hp.configs(mode, fmt.Sprintf("%s:%s:%s%d:", run, alg, mode, k+1), alg, limits, coldLimit, hp.warmup, hp.measure)
				r, err := runHotWorkers(ctx, client, redisPid, cfgs)
				if err != nil {
					b.rep.add(result{Scenario: "hotkeys", Case: fmt.Sprintf("%s, %s, p99 pair %d", alg, mode, k+1), Status: statusError, Note: err.Error()})
					return
				}
				more = append(more, r)
				b.logf("hotkeys %s %s: %.0f decisions/s, p99 %v", alg, mode, r.rate(), histQuantile(r.lat, 0.99))
			}
		}
		b.hotRows(hp, alg, hp.configs(modeOn, "", alg, limits, coldLimit, hp.warmup, hp.measure)[0], runs, cal, more...)
	}
}

// pairRuns returns the runs of the p99 verdict's pairs by store: first
// and mem the first pair's, more the further pairs' runs in the order
// they ran.
func pairRuns(first, mem *hotRun, more []*hotRun) (on, memory []*hotRun) {
	on, memory = []*hotRun{first}, []*hotRun{mem}
	for _, r := range more {
		if r.mode == modeOn {
			on = append(on, r)
		} else {
			memory = append(memory, r)
		}
	}
	return on, memory
}

// pooledLat sums the latency histograms of runs: all decisions, and those
// on the hottest keys.
func pooledLat(runs []*hotRun) (lat, hotLat []int64) {
	for _, r := range runs {
		lat, hotLat = addHist(lat, r.lat), addHist(hotLat, r.hotLat)
	}
	return lat, hotLat
}

// hotOneKey runs one key shared by the workers at 10× its limit.
func (b *bench) hotOneKey(ctx context.Context, hp hotPlan, client *redis.Client, redisPid int, run string) {
	for _, alg := range hp.algorithms {
		runs := map[string]*hotRun{}
		for _, mode := range hp.oneModes {
			b.logf("hotkeys one key %s: %s", alg, mode)
			cfgs := hp.oneConfigs(mode, fmt.Sprintf("%s:one:%s:%s:", run, alg, mode), alg)
			r, err := runHotWorkers(ctx, client, redisPid, cfgs)
			if err != nil {
				b.rep.add(result{Scenario: "hotkeys", Case: fmt.Sprintf("one key, %s, %s", alg, mode), Status: statusError, Note: err.Error()})
				return
			}
			runs[mode] = r
		}
		b.oneRows(hp, alg, hp.oneConfigs(modeOn, "", alg)[0], runs)
	}
}

// configs returns the workers' configs of one run: hp.procs workers (on
// Redis, or each with its own memory store), or one worker with every
// caller for modeMemoryOne.
func (hp hotPlan) configs(mode, prefix string, alg limit.Algorithm, limits []int64, cold int64, warmup, measure time.Duration) []hotConfig {
	if limits == nil {
		limits = slices.Repeat([]int64{cold}, hp.hot)
	}
	c := hotConfig{Mode: mode, Prefix: prefix, Callers: hp.callers, Keys: hp.keys, Zipf: hp.zipf, Algorithm: alg,
		HotLimits: limits, ColdLimit: cold, Warmup: warmup, Measure: measure, Tick: hp.tick}
	if mode == modeOn {
		c.ColdLease = hp.coldLease
	}
	n := hp.procs
	if mode == modeMemoryOne {
		c.Callers, n = hp.callers*hp.procs, 1
	}
	out := make([]hotConfig, n)
	for i := range out {
		out[i] = c
		out[i].Seed = uint64(i + 1)
	}
	return out
}

// oneConfigs returns the one-key case's workers: every caller paced so that
// the workers together ask for hp.oneDemand decisions per second.
func (hp hotPlan) oneConfigs(mode, prefix string, alg limit.Algorithm) []hotConfig {
	out := hp.configs(mode, prefix, alg, []int64{hp.oneLimit}, hp.oneLimit, hp.oneWarmup, hp.oneMeasure)
	for i := range out {
		out[i].Keys = 1
		out[i].Pace = float64(hp.oneDemand) / float64(hp.callers*hp.procs)
	}
	return out
}

// hotRows reports the mix's runs of one algorithm: runs by mode, and more,
// the further runs of the p99 verdict's pairs (on and memory, each with its
// mode), whose on runs are checked for exactness as well.
func (b *bench) hotRows(hp hotPlan, alg limit.Algorithm, cfg hotConfig, runs map[string]*hotRun, cal *hotRun, more ...*hotRun) {
	off, on, mem, mem1 := runs[modeOff], runs[modeOn], runs[modeMemory], runs[modeMemoryOne]
	onPairs, memPairs := pairRuns(on, mem, more)
	scen := "hotkeys"
	what := fmt.Sprintf("%s, %d processes × %d callers, Zipf(%.1f) over %d keys, %d hottest at their limit", alg, hp.procs, hp.callers, hp.zipf, hp.keys, hp.hot)
	ratio := on.rate() / off.rate()
	var hotN int64
	for _, n := range on.hotDemand {
		hotN += n
	}
	hotShare := float64(hotN) / float64(on.decisions)
	b.rep.add(result{Scenario: scen, Case: what + ": decisions/s, allowances on ÷ off", Store: "redis",
		Ours: fmt.Sprintf("on %.0f/s, off %.0f/s: %.2f×", on.rate(), off.rate(), ratio),
		Peer: fmt.Sprintf("memory store in each process: %.0f/s; in one process: %.0f/s", mem.rate(), mem1.rate()), Goal: "≥ 5×", Status: verdict(ratio >= 5),
		Values: map[string]float64{"on_per_s": on.rate(), "off_per_s": off.rate(), "memory_per_s": mem.rate(), "memory_one_per_s": mem1.rate(), "ratio": ratio,
			"calibration_per_s": cal.rate(), "hot_share": hotShare},
		Note: fmt.Sprintf("limits: half the demand measured on today's path (%d/s hottest … %d/s 100th); other keys unbounded; %v measured after %v; %s of the decisions (on) were on the %d hottest keys",
			cfg.HotLimits[0], cfg.HotLimits[len(cfg.HotLimits)-1], hp.measure, hp.warmup, fmtPct(hotShare), hp.hot)})
	cpd := on.perDecision()
	b.rep.add(result{Scenario: scen, Case: fmt.Sprintf("%s: Redis commands per decision, on", alg), Store: "redis",
		Ours: fmt.Sprintf("%.4f (off %.3f)", cpd, off.perDecision()), Goal: "≤ 0.05", Status: verdict(cpd <= 0.05),
		Values: map[string]float64{"on": cpd, "off": off.perDecision()},
		Note:   joinNotes("INFO commandstats over the measured time, commands run by scripts included", statsNote(on))})
	for i, r := range append([]*hotRun{off}, onPairs...) {
		ex := checkExact(r, cfg)
		st := statusMet
		if ex.violations > 0 || !ex.coldOK || r.errors > 0 {
			st = statusError // the scenario fails: an over-admission, or decisions that failed
		}
		mode := r.mode
		if i > 1 {
			mode = fmt.Sprintf("%s (p99 pair %d)", r.mode, i)
		}
		b.rep.add(result{Scenario: scen, Case: fmt.Sprintf("%s, %s: admitted ≤ limit, every key, every span of %v ticks", alg, mode, hp.tick), Store: "redis",
			Ours: fmt.Sprintf("%d violations over %d limited keys (largest proven excess %d)", ex.violations, ex.keys, max(ex.worst, 0)),
			Goal: "0 violations", Status: st,
			Values: map[string]float64{"violations": float64(ex.violations), "spans_over": float64(ex.spans), "keys": float64(ex.keys),
				"worst_excess": float64(ex.worst), "errors": float64(r.errors)},
			Note: joinNotes(exactNote(alg), errNote(r))})
	}
	sOn, sOff := saturated(on, cfg), saturated(off, cfg)
	// The one-trip path's least-served key shows what the measurement
	// itself (closed-loop callers, admissions dated by the clock) leaves
	// of a saturated key's limit, the reference for the "on" figure.
	offSat := fmt.Sprintf("%s (least served %s)", fmtPct(sOff.ratio), fmtPct(sOff.min))
	if sOff.keys == 0 {
		offSat = "no key saturated" // its callers' demand stayed under 1.5× every limit
	}
	onSat := "on: no key saturated"
	if sOn.keys > 0 {
		onSat = fmt.Sprintf("on %s (least served %s: rank %d, limit %d/s, demand %.1f× it; %d keys)", fmtPct(sOn.ratio), fmtPct(sOn.min),
			sOn.minRank+1, cfg.HotLimits[sOn.minRank], sOn.minDemand, sOn.keys)
	}
	satRes := result{Scenario: scen, Case: fmt.Sprintf("%s: admitted ÷ limit on saturated keys, steady state", alg), Store: "redis",
		Ours: onSat + "; off " + offSat, Goal: "≥ 97% on each", Status: verdict(sOn.keys > 0 && sOn.min >= 0.97),
		Values: map[string]float64{"on": sOn.ratio, "on_min": sOn.min, "on_keys": float64(sOn.keys), "off": sOff.ratio},
		Note:   "keys whose demand was ≥ 1.5× their limit over the measured time"}
	if sOff.keys > 0 {
		satRes.Values["off_min"] = sOff.min
	}
	b.rep.add(satRes)
	// The reference is the memory store at each instance: the same worker
	// processes and callers, so both face the same time slicing of the
	// machine's cores; the one-process run shows what that slicing costs.
	// The verdict pools the pairs' runs of each store; the workers'
	// counts in the note are the first pair's.
	onLat, onHot := pooledLat(onPairs)
	memLat, memHot := pooledLat(memPairs)
	p99on, p99mem, p99off, p99mem1 := histQuantile(onLat, 0.99), histQuantile(memLat, 0.99), histQuantile(off.lat, 0.99), histQuantile(mem1.lat, 0.99)
	vals := map[string]float64{"on_p99_us": us(p99on), "on_hot_p99_us": us(histQuantile(onHot, 0.99)), "on_over_50us": histAbove(onLat, 50_000),
		"off_p99_us": us(p99off), "memory_p99_us": us(p99mem), "memory_one_p99_us": us(p99mem1), "memory_over_50us": histAbove(memLat, 50_000),
		"on_preempted_per_s": float64(on.preempted) / on.seconds, "memory_preempted_per_s": float64(mem.preempted) / mem.seconds,
		"pairs": float64(len(onPairs))}
	pairsNote := ""
	if len(onPairs) > 1 {
		var each []string
		met := 0
		for k := range onPairs {
			a, m := histQuantile(onPairs[k].lat, 0.99), histQuantile(memPairs[k].lat, 0.99)
			if a <= m {
				met++
			}
			vals[fmt.Sprintf("pair%d_ratio", k+1)] = float64(a) / float64(m)
			each = append(each, fmt.Sprintf("%s / %s", fmtNs(a), fmtNs(m)))
		}
		vals["pairs_met"] = float64(met)
		pairsNote = fmt.Sprintf("p99 of %d pairs of runs pooled, measured on, memory; memory, on; and so on: by pair %s, at or below in %d of %d; the workers' counts below are the first pair's; ",
			len(onPairs), strings.Join(each, ", "), met, len(onPairs))
	}
	b.rep.add(result{Scenario: scen, Case: fmt.Sprintf("%s: p99 decision latency, on", alg), Store: "redis",
		Ours: fmt.Sprintf("%s (p50 %s; hot keys p99 %s); off %s", fmtDur(p99on), fmtDur(histQuantile(onLat, 0.5)), fmtDur(histQuantile(onHot, 0.99)), fmtDur(p99off)),
		Peer: fmt.Sprintf("memory store in each process: %s (p50 %s); in one process: %s", fmtDur(p99mem), fmtDur(histQuantile(memLat, 0.5)), fmtDur(p99mem1)),
		Goal: "≤ the memory store's", Status: verdict(p99on <= p99mem),
		Values: vals,
		Note: pairsNote + fmt.Sprintf("quantiles on / memory in each process: %s; by key: the %d hottest %s, the others %s; decisions over 50 µs (a Redis round trip): on %s, off %s, memory in each process %s; workers' CPU per decision: on %.1f µs, off %.1f µs, memory %.1f µs; workers preempted by the kernel %.0f/s on, %.0f/s memory in each process, %.0f/s in one; workers' garbage collections %d on (%.0f ms of CPU), %d memory in each process (%.0f ms); redis-server busy %s of a core on, %s off",
			quantiles(onLat, memLat), len(cfg.HotLimits), pathQuantiles(onHot, memHot), pathQuantiles(subHist(onLat, onHot), subHist(memLat, memHot)),
			fmtPct(histAbove(onLat, 50_000)), fmtPct(histAbove(off.lat, 50_000)), fmtPct(histAbove(memLat, 50_000)), cpuPer(on), cpuPer(off), cpuPer(mem),
			float64(on.preempted)/on.seconds, float64(mem.preempted)/mem.seconds, float64(mem1.preempted)/mem1.seconds,
			on.gcCycles, on.gcCPU*1000, mem.gcCycles, mem.gcCPU*1000,
			fmtPct(on.redisCPU/on.seconds), fmtPct(off.redisCPU/off.seconds))})
}

// quantiles lists the quantiles of two latency histograms side by side,
// where a p99 is set: the share of slow decisions and the bulk's tail.
func quantiles(a, b []int64) string {
	var parts []string
	for _, q := range []float64{0.9, 0.95, 0.98, 0.99, 0.995, 0.999} {
		parts = append(parts, fmt.Sprintf("p%s %s / %s", strconv.FormatFloat(q*100, 'f', -1, 64),
			fmtNs(histQuantile(a, q)), fmtNs(histQuantile(b, q))))
	}
	return strings.Join(parts, ", ")
}

// pathQuantiles is the p90 and p99 of two latency histograms of one part
// of the keys, side by side.
func pathQuantiles(a, b []int64) string {
	return fmt.Sprintf("p90 %s / %s, p99 %s / %s", fmtNs(histQuantile(a, 0.9)), fmtNs(histQuantile(b, 0.9)),
		fmtNs(histQuantile(a, 0.99)), fmtNs(histQuantile(b, 0.99)))
}

// subHist is the histogram a less the counts of b, a part of it.
func subHist(a, b []int64) []int64 {
	out := slices.Clone(a)
	for i, n := range b {
		out[i] -= n
	}
	return out
}

// fmtNs prints a latency to the nanosecond under 10 µs, else as fmtDur.
func fmtNs(d time.Duration) string {
	if d < 10*time.Microsecond {
		return fmt.Sprintf("%.2f µs", float64(d)/1e3)
	}
	return fmtDur(d)
}

func (b *bench) oneRows(hp hotPlan, alg limit.Algorithm, cfg hotConfig, runs map[string]*hotRun) {
	off, on := runs[modeOff], runs[modeOn]
	scen := "hotkeys"
	what := fmt.Sprintf("one key, %s %d/s, %d processes at %d decisions/s", alg, hp.oneLimit, hp.procs, hp.oneDemand)
	sOn := saturated(on, cfg)
	peer, offCPD, offRatio := "not run (--quick)", math.NaN(), math.NaN()
	if off != nil {
		sOff := saturated(off, cfg)
		peer, offCPD, offRatio = "off: "+sOff.fmtWindows(), off.perDecision(), sOff.ratio
	}
	lo, hi, exact := sOn.windowRange(hp.oneLimit)
	b.rep.add(result{Scenario: scen, Case: what + ": admitted per 1-s window, on", Store: "redis",
		Ours: fmt.Sprintf("%d–%d; %d of %d windows can hold exactly %d; %s of the limit over the run", lo, hi, exact, len(sOn.winCertain), hp.oneLimit, fmtPct(sOn.ratio)),
		Peer: peer,
		Goal: fmt.Sprintf("= %d ± 0", hp.oneLimit), Status: verdict(exact == len(sOn.winCertain) && exact > 0),
		Values: map[string]float64{"min": float64(lo), "max": float64(hi), "ratio": sOn.ratio, "off_ratio": offRatio},
		Note:   "on: " + sOn.fmtWindows() + " (c+m: c certainly in the window, m dated across its edge)"})
	cpd := on.perDecision()
	b.rep.add(result{Scenario: scen, Case: what + ": Redis commands per decision, on", Store: "redis",
		Ours: fmt.Sprintf("%.4f (off %.3f)", cpd, offCPD), Goal: "≤ 0.01", Status: verdict(cpd <= 0.01),
		Values: map[string]float64{"on": cpd, "off": offCPD}, Note: statsNote(on)})
	for _, r := range []*hotRun{off, on} {
		if r == nil {
			continue
		}
		ex := checkExact(r, cfg)
		st := statusMet
		if ex.violations > 0 || r.errors > 0 {
			st = statusError
		}
		b.rep.add(result{Scenario: scen, Case: fmt.Sprintf("%s, %s: admitted ≤ limit, every span of %v ticks", what, r.mode, hp.tick), Store: "redis",
			Ours: fmt.Sprintf("%d spans over (largest proven excess %d)", ex.spans, max(ex.worst, 0)), Goal: "0", Status: st,
			Values: map[string]float64{"spans_over": float64(ex.spans), "worst_excess": float64(ex.worst), "errors": float64(r.errors)},
			Note:   joinNotes(exactNote(alg), errNote(r))})
	}
}

func exactNote(alg limit.Algorithm) string {
	if alg == limit.FixedWindowAlgorithm {
		return "every 1-s window: admissions certainly inside it ≤ limit"
	}
	return "every span of whole ticks: admissions certainly inside it ≤ limit + rate × span"
}

// statsNote sums up the stores' AllowanceStats, when the library has them.
func statsNote(r *hotRun) string {
	st := r.stats
	if st == nil {
		return ""
	}
	local, remote := st["Local"], st["Remote"]
	share := 0.0
	if local+remote > 0 {
		share = float64(local) / float64(local+remote)
	}
	return fmt.Sprintf("stores: %s of decisions from allowances (%d local, %d of them from cold leases; %d one-trip), %d script calls, %d takes/renewals (%d in the background), %d cold leases renewed early, units lent %d, returned %d, expired %d",
		fmtPct(share), local, st["ColdLocal"], remote, st["Commands"], st["Renewals"], st["Background"], st["ColdRenewals"], st["Lent"], st["Returned"], st["Expired"])
}

func errNote(r *hotRun) string {
	var s []string
	if r.errors > 0 {
		s = append(s, fmt.Sprintf("%d decisions failed, first: %s", r.errors, r.firstErr))
	}
	if r.closeErr != "" {
		s = append(s, "Close: "+r.closeErr)
	}
	return strings.Join(s, "; ")
}

// cpuPer is the workers' CPU per decision in µs, over the measured time.
func cpuPer(r *hotRun) float64 {
	if r.decisions == 0 {
		return math.NaN()
	}
	return r.cpu * 1e6 / float64(r.decisions)
}

// pidCPU is the user and system CPU seconds of process pid (Linux).
func pidCPU(pid int) (float64, error) {
	if pid <= 0 {
		return 0, errors.New("no process")
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100, nil // clock ticks of 100 Hz
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// windowRange returns the fewest and most admissions a window can have
// held, and how many windows can have held exactly l.
func (s saturation) windowRange(l int64) (lo, hi int64, exact int) {
	if len(s.winCertain) == 0 {
		return 0, 0, 0
	}
	lo, hi = math.MaxInt64, 0
	for i, c := range s.winCertain {
		m := s.winMaybe[i]
		lo, hi = min(lo, c), max(hi, c+m)
		if c <= l && l <= c+m {
			exact++
		}
	}
	return lo, hi, exact
}

func (s saturation) fmtWindows() string {
	out := make([]string, len(s.winCertain))
	for i, c := range s.winCertain {
		out[i] = strconv.FormatInt(c, 10)
		if m := s.winMaybe[i]; m > 0 {
			out[i] += "+" + strconv.FormatInt(m, 10)
		}
	}
	return "per window " + strings.Join(out, ", ")
}

// hotColdLimit is the limit per second of the keys beyond the hottest: more
// than any run admits on one key, so that only the hottest keys are bound.
const hotColdLimit = 1_000_000
