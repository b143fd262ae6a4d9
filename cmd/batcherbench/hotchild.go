package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/bits"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/redislimit"
	"github.com/redis/go-redis/v9"
)

// The hotkeys scenario runs this program again as worker processes
// (hotChildArg followed by a hotConfig in JSON). Each worker makes its own
// store, runs its callers from Start to the end of the measured time, and
// prints what it counted (hotResult in JSON) on stdout.

const hotChildArg = "--hotkeys-child"

// Store modes of a worker.
const (
	modeOff    = "off"    // redislimit, one round trip per decision (today's path)
	modeOn     = "on"     // redislimit with Options.LocalAllowance
	modeMemory = "memory" // limit.Memory in each worker: the local store at each instance
	// modeMemoryOne is limit.Memory in one worker that runs every caller.
	modeMemoryOne = "memory-one"
	// modeBroken admits every request: a store that ignores its limits,
	// with which the tests prove that the exactness check fails a run.
	modeBroken = "broken"
)

// hotConfig is one worker's part of a run.
type hotConfig struct {
	Mode      string          `json:"mode"`
	Redis     string          `json:"redis,omitempty"`
	Prefix    string          `json:"prefix"`
	Callers   int             `json:"callers"`
	Keys      int             `json:"keys"`       // distinct keys; 1 for the one-key case
	Zipf      float64         `json:"zipf"`       // exponent; ignored with one key
	Algorithm limit.Algorithm `json:"algorithm"`  // token_bucket, gcra, fixed_window
	HotLimits []int64         `json:"hot_limits"` // per second (per window), of the hottest keys by rank
	ColdLimit int64           `json:"cold_limit"` // of every other key
	Start     int64           `json:"start"`      // Unix ns: callers start then
	Warmup    time.Duration   `json:"warmup"`     // not counted in decisions/s and latency
	Measure   time.Duration   `json:"measure"`
	Tick      time.Duration   `json:"tick"`
	Pace      float64         `json:"pace"` // decisions per second per caller; 0: as fast as possible
	Seed      uint64          `json:"seed"`
	ColdLease time.Duration   `json:"cold_lease,omitempty"` // Options.ColdLease in mode on
}

// policy returns the policy of a key with the given limit per second.
func (c hotConfig) policy(l int64) limit.Policy {
	switch c.Algorithm {
	case limit.GCRAAlgorithm:
		return limit.GCRA(limit.PerSecond(l), l)
	case limit.FixedWindowAlgorithm:
		return limit.FixedWindow(l, time.Second)
	}
	return limit.TokenBucket(l, limit.PerSecond(l))
}

func (c hotConfig) firstTick() int64 { return c.Start / int64(c.Tick) }
func (c hotConfig) ticks() int {
	return int((c.Start+int64(c.Warmup+c.Measure))/int64(c.Tick)-c.firstTick()) + 1
}

// hotResult is what a worker counted.
type hotResult struct {
	Decisions  int64            `json:"decisions"` // in the measured time
	Admitted   int64            `json:"admitted"`  // in the measured time
	Errors     int64            `json:"errors"`    // over the whole run
	FirstError string           `json:"first_error,omitempty"`
	Seconds    float64          `json:"seconds"` // measured time as it ran
	Latency    []int64          `json:"latency"` // histogram, all measured decisions
	HotLatency []int64          `json:"hot_latency"`
	HotDemand  []int64          `json:"hot_demand"`            // measured decisions per hot rank
	Certain    map[string]int64 `json:"certain"`               // "rank tick" → admissions, hot ranks
	Across     map[string]int64 `json:"across"`                // "rank first last" → admissions
	ColdMax    int64            `json:"cold_max"`              // largest admissions of one cold key, whole run
	CloseError string           `json:"close_error,omitempty"` // Store.Close
	StoreStats map[string]int64 `json:"store_stats,omitempty"` // the store's AllowanceStats, measured time
	CPUSeconds float64          `json:"cpu_seconds"`           // this process, measured time
	// Preempted counts the times the kernel took a CPU from this process's
	// threads (involuntary context switches) in the measured time: each can
	// stretch the decision that thread was making by a time slice.
	Preempted int64 `json:"preempted"`
	// GCCycles and GCCPUSeconds are the garbage collections this process
	// ended in the measured time and the CPU they took (runtime/metrics).
	GCCycles     int64   `json:"gc_cycles"`
	GCCPUSeconds float64 `json:"gc_cpu_seconds"`
}

// Latency histogram: 32 buckets per power of two of nanoseconds.
const histSub = 32

func histIndex(ns int64) int {
	if ns < histSub {
		return int(max(ns, 0))
	}
	e := bits.Len64(uint64(ns)) - 6 // ns >> e in [32, 64)
	return (e+1)*histSub + int(ns>>e) - histSub
}

// histValue is the upper bound of bucket i.
func histValue(i int) int64 {
	if i < histSub {
		return int64(i)
	}
	e := i/histSub - 1
	return int64(i%histSub+histSub+1)<<e - 1
}

func histQuantile(h []int64, q float64) time.Duration {
	var n int64
	for _, c := range h {
		n += c
	}
	if n == 0 {
		return 0
	}
	want := int64(q*float64(n)) + 1
	var seen int64
	for i, c := range h {
		seen += c
		if seen >= want {
			return time.Duration(histValue(i))
		}
	}
	return time.Duration(histValue(len(h) - 1))
}

// histAbove is the share of the counts above ns.
func histAbove(h []int64, ns int64) float64 {
	var n, above int64
	for i, c := range h {
		n += c
		if histValue(i) > ns {
			above += c
		}
	}
	if n == 0 {
		return 0
	}
	return float64(above) / float64(n)
}

func addHist(dst, src []int64) []int64 {
	if len(dst) < len(src) {
		dst = append(dst, make([]int64, len(src)-len(dst))...)
	}
	for i, c := range src {
		dst[i] += c
	}
	return dst
}

// runHotChild is the worker: it reads its config from arg and writes its
// result to stdout.
func runHotChild(arg string, stdout io.Writer) int {
	var cfg hotConfig
	if err := json.Unmarshal([]byte(arg), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "hotkeys worker: bad config:", err)
		return 2
	}
	res, err := hotWork(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hotkeys worker:", err)
		return 1
	}
	w := bufio.NewWriter(stdout)
	if err := json.NewEncoder(w).Encode(res); err != nil {
		return 1
	}
	if err := w.Flush(); err != nil {
		return 1
	}
	return 0
}

// callerCounts are one caller's counts, merged at the end.
type callerCounts struct {
	decisions, admitted, errors int64
	firstErr                    error
	lat, hotLat                 []int64
	hotDemand                   []int64
	certain                     []int64 // [rank*ticks + tick]
	across                      map[[3]int32]int64
}

func hotWork(cfg hotConfig) (*hotResult, error) {
	var store limit.Store
	var closeStore func() error
	var client *redis.Client
	switch cfg.Mode {
	case modeMemory, modeMemoryOne:
		m, err := limit.NewMemory(limit.MemoryOptions{})
		if err != nil {
			return nil, err
		}
		store, closeStore = m, func() error { return nil }
	case modeBroken:
		store, closeStore = admitAll{}, func() error { return nil }
	case modeOff, modeOn:
		if cfg.Redis == "" {
			return nil, fmt.Errorf("mode %s needs a Redis address", cfg.Mode)
		}
		client = redis.NewClient(&redis.Options{Addr: cfg.Redis, PoolSize: cfg.Callers})
		defer client.Close()
		s, err := redislimit.New(client, redislimit.Options{Prefix: cfg.Prefix, LocalAllowance: cfg.Mode == modeOn,
			ColdLease: cfg.ColdLease})
		if err != nil {
			return nil, err
		}
		store = s
		closeStore = func() error {
			// Close gives back every cold lease: tens of microseconds of
			// script time each, 100,000 or more per worker.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			return s.Close(ctx)
		}
	default:
		return nil, fmt.Errorf("unknown mode %q", cfg.Mode)
	}

	keys := make([]string, cfg.Keys)
	pols := make([]limit.Policy, cfg.Keys)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
		l := cfg.ColdLimit
		if i < len(cfg.HotLimits) {
			l = cfg.HotLimits[i]
		}
		pols[i] = cfg.policy(l)
		if err := pols[i].Validate(); err != nil {
			return nil, err
		}
	}
	hot := len(cfg.HotLimits)
	ticks := cfg.ticks()
	first := cfg.firstTick()
	tick := int64(cfg.Tick)
	start := time.Unix(0, cfg.Start)
	from := start.Add(cfg.Warmup)
	end := from.Add(cfg.Measure)
	cold := make([]atomic.Int64, cfg.Keys)
	var cpu [2]float64 // at from and at end
	var preempt [2]int64
	var gcs [2]gcStat
	var storeDelta map[string]int64
	cpuDone := make(chan struct{})
	go func() {
		defer close(cpuDone)
		time.Sleep(time.Until(from))
		stopProfile := startProfile(cfg)
		cpu[0], preempt[0], _ = procCPU()
		gcs[0] = readGC()
		st0 := storeStats(store)
		time.Sleep(time.Until(end))
		cpu[1], preempt[1], _ = procCPU()
		gcs[1] = readGC()
		st1 := storeStats(store)
		stopProfile()
		for k, v := range st1 {
			if storeDelta == nil {
				storeDelta = map[string]int64{}
			}
			storeDelta[k] = v - st0[k]
		}
	}()

	counts := make([]*callerCounts, cfg.Callers)
	var wg sync.WaitGroup
	time.Sleep(time.Until(start))
	for ci := range counts {
		cc := &callerCounts{hotDemand: make([]int64, hot), certain: make([]int64, hot*ticks),
			across: map[[3]int32]int64{}}
		counts[ci] = cc
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(cfg.Seed)*1_000_003 + int64(ci)))
			var zipf *rand.Zipf
			if cfg.Keys > 1 {
				zipf = rand.NewZipf(rng, cfg.Zipf, 1, uint64(cfg.Keys-1))
			}
			var gap time.Duration
			next := time.Now()
			if cfg.Pace > 0 {
				gap = time.Duration(float64(time.Second) / cfg.Pace)
				next = next.Add(time.Duration(rng.Int63n(int64(gap)))) // spread the callers
			}
			ctx := context.Background()
			for {
				if gap > 0 {
					time.Sleep(time.Until(next))
					next = next.Add(gap)
				}
				k := 0
				if zipf != nil {
					k = int(zipf.Uint64())
				}
				t0 := time.Now()
				if !t0.Before(end) {
					return
				}
				dec, err := store.AllowN(ctx, keys[k], pols[k], 1)
				t1 := time.Now()
				measured := !t0.Before(from)
				if err != nil {
					cc.errors++
					if cc.firstErr == nil {
						cc.firstErr = err
					}
					continue
				}
				if measured {
					cc.decisions++
					d := t1.Sub(t0).Nanoseconds()
					cc.lat = incHist(cc.lat, d)
					if k < hot {
						cc.hotLat = incHist(cc.hotLat, d)
						cc.hotDemand[k]++
					}
				}
				if !dec.Allowed {
					continue
				}
				if measured {
					cc.admitted++
				}
				if k >= hot {
					cold[k].Add(1)
					continue
				}
				a, b := t0.UnixNano()/tick-first, t1.UnixNano()/tick-first
				if a == b {
					cc.certain[k*ticks+int(a)]++
				} else {
					cc.across[[3]int32{int32(k), int32(a), int32(b)}]++
				}
			}
		}()
	}
	wg.Wait()
	res := &hotResult{Seconds: cfg.Measure.Seconds(), HotDemand: make([]int64, hot),
		Certain: map[string]int64{}, Across: map[string]int64{}}
	if err := closeStore(); err != nil {
		res.CloseError = err.Error()
	}
	<-cpuDone
	res.CPUSeconds = cpu[1] - cpu[0]
	res.Preempted = preempt[1] - preempt[0]
	res.GCCycles = int64(gcs[1].cycles - gcs[0].cycles)
	res.GCCPUSeconds = gcs[1].cpu - gcs[0].cpu
	res.StoreStats = storeDelta
	for _, cc := range counts {
		res.Decisions += cc.decisions
		res.Admitted += cc.admitted
		res.Errors += cc.errors
		if cc.firstErr != nil && res.FirstError == "" {
			res.FirstError = cc.firstErr.Error()
		}
		res.Latency = addHist(res.Latency, cc.lat)
		res.HotLatency = addHist(res.HotLatency, cc.hotLat)
		for i, n := range cc.hotDemand {
			res.HotDemand[i] += n
		}
		for i, n := range cc.certain {
			if n > 0 {
				res.Certain[fmt.Sprintf("%d %d", i/ticks, i%ticks)] += n
			}
		}
		for k, n := range cc.across {
			res.Across[fmt.Sprintf("%d %d %d", k[0], k[1], k[2])] += n
		}
	}
	for i := range cold {
		res.ColdMax = max(res.ColdMax, cold[i].Load())
	}
	return res, nil
}

func incHist(h []int64, ns int64) []int64 {
	i := histIndex(ns)
	if i >= len(h) {
		h = append(h, make([]int64, i+1-len(h))...)
	}
	h[i]++
	return h
}

// storeStats returns the integer fields of the store's AllowanceStats, by
// name, or nil when the store has no such method (read by reflection, so
// that this tool builds against versions of the library before it).
func storeStats(store limit.Store) map[string]int64 {
	m := reflect.ValueOf(store).MethodByName("AllowanceStats")
	if !m.IsValid() || m.Type().NumIn() != 0 || m.Type().NumOut() != 1 || m.Type().Out(0).Kind() != reflect.Struct {
		return nil
	}
	v := m.Call(nil)[0]
	out := map[string]int64{}
	for i := range v.NumField() {
		if f := v.Field(i); f.CanInt() && v.Type().Field(i).IsExported() {
			out[v.Type().Field(i).Name] = f.Int()
		}
	}
	return out
}

// startProfile writes a CPU profile of the measured time to the directory
// HOTKEYS_CPUPROFILE names, if set, as <algorithm>-<mode>-<seed>.pprof
// (read with go tool pprof) with the lock contention of that time beside it
// (<algorithm>-<mode>-<seed>.mutex.pprof), and an execution trace of its first second to
// the directory HOTKEYS_TRACE names, if set, as <algorithm>-<mode>-<seed>.trace
// (go tool trace; -pprof=sched shows where decisions waited to run).
func startProfile(cfg hotConfig) (stop func()) {
	if dir := os.Getenv("HOTKEYS_TRACE"); dir != "" {
		startTrace(filepath.Join(dir, fmt.Sprintf("%s-%s-%d.trace", cfg.Algorithm, cfg.Mode, cfg.Seed)), time.Second)
	}
	dir := os.Getenv("HOTKEYS_CPUPROFILE")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%s-%d.pprof", cfg.Algorithm, cfg.Mode, cfg.Seed)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "hotkeys worker: profile:", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		fmt.Fprintln(os.Stderr, "hotkeys worker: profile:", err)
		return func() {}
	}
	runtime.SetMutexProfileFraction(10)
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		// Where the locks that made decisions wait were let go: one in
		// ten such waits sampled, over the measured time.
		if m, err := os.Create(strings.TrimSuffix(f.Name(), ".pprof") + ".mutex.pprof"); err == nil {
			_ = pprof.Lookup("mutex").WriteTo(m, 0)
			m.Close()
		}
	}
}

// startTrace writes an execution trace of the next d to path, stopping it
// on a goroutine of its own.
func startTrace(path string, d time.Duration) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hotkeys worker: trace:", err)
		return
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		fmt.Fprintln(os.Stderr, "hotkeys worker: trace:", err)
		return
	}
	go func() {
		time.Sleep(d)
		trace.Stop()
		f.Close()
	}()
}

// gcStat is the garbage collector's work so far: cycles ended and the
// CPU seconds it took.
type gcStat struct {
	cycles uint64
	cpu    float64
}

func readGC() gcStat {
	ms := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(ms)
	var g gcStat
	if ms[0].Value.Kind() == metrics.KindUint64 {
		g.cycles = ms[0].Value.Uint64()
	}
	if ms[1].Value.Kind() == metrics.KindFloat64 {
		g.cpu = ms[1].Value.Float64()
	}
	return g
}

// procCPU is this process's user and system CPU time in seconds, and its
// involuntary context switches so far.
func procCPU() (float64, int64, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds(), int64(ru.Nivcsw), nil
}

// admitAll is modeBroken's store.
type admitAll struct{ limit.Store }

func (admitAll) AllowN(_ context.Context, _ string, p limit.Policy, _ int64) (limit.Decision, error) {
	return limit.Decision{Allowed: true, Limit: p.Limit}, nil
}
