// Command limiterbench is a load generator for rate limit services: it
// calls one API of a running service from many concurrent callers for a
// while and reports decisions per second, latency percentiles, the
// service's CPU seconds per million decisions (read from /proc for --pid)
// and Redis commands per decision (from INFO of --redis).
//
// APIs (--api):
//
//	envoy   gRPC envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
//	json    POST /json, the same request in protobuf JSON
//	rest    POST /limit with X-Client-Key (limiterd)
//	allow   gRPC ratelimiter.v1.RateLimiter/Allow (limiterd)
//
// Envoy requests carry 1 to 3 descriptors (--descriptors) of the domain
// "bench": user (one of --keys values), tenant (one of 100) and route (one
// value), as in scripts/bench-limiterd's rule file. With --zipf S the user
// of rank k (u0 the hottest) is drawn with probability proportional to
// (k+1)^-S, as scripts/bench-hotkeys-envoy does; otherwise uniformly. Every
// caller sends its next request as soon as the last is answered.
//
// Example:
//
//	limiterbench --api envoy --addr 127.0.0.1:8081 --descriptors 3 --pid 1234 --redis 127.0.0.1:6379
//
// With --write-protoset FILE it writes the descriptors of both gRPC
// services, with their imports, as a FileDescriptorSet and exits, so that
// another load generator (ghz --protoset FILE) can call the same methods.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	ratelimiterv1 "github.com/costwise/batcher/api/ratelimiter/v1"
)

type config struct {
	api, addr, name, redisAddr string
	descriptors, keys, conc    int
	pid, redisPid              int
	duration, warmup           time.Duration
	zipf                       float64   // exponent; 0 draws users uniformly
	cdf                        []float64 // with zipf: the users' cumulative probabilities
}

func main() {
	var c config
	flag.StringVar(&c.api, "api", "envoy", "API to call: envoy, json, rest, allow")
	flag.StringVar(&c.addr, "addr", "127.0.0.1:8081", "service address (gRPC for envoy and allow, HTTP for json and rest)")
	flag.StringVar(&c.name, "name", "service", "name of the service in the report")
	flag.StringVar(&c.redisAddr, "redis", "", "Redis to count commands on (host:port); empty skips")
	flag.IntVar(&c.descriptors, "descriptors", 1, "descriptors per Envoy request, 1 to 3")
	flag.IntVar(&c.keys, "keys", 10000, "distinct user keys")
	flag.Float64Var(&c.zipf, "zipf", 0, "draw users Zipf(S) by rank, S > 0 (u0 the hottest); 0 draws them uniformly")
	flag.IntVar(&c.conc, "concurrency", 64, "concurrent callers")
	flag.IntVar(&c.pid, "pid", 0, "service process to read CPU time of; 0 skips")
	flag.IntVar(&c.redisPid, "redis-pid", 0, "redis-server process to read CPU time of; 0 skips")
	flag.DurationVar(&c.duration, "duration", 10*time.Second, "measured time")
	flag.DurationVar(&c.warmup, "warmup", 2*time.Second, "unmeasured time before")
	protosetPath := flag.String("write-protoset", "", "write the gRPC services' descriptors to this file and exit")
	flag.Parse()
	if *protosetPath != "" {
		if err := writeProtoset(*protosetPath); err != nil {
			fmt.Fprintln(os.Stderr, "limiterbench:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "limiterbench:", err)
		os.Exit(1)
	}
}

// overLimit counts the Envoy answers OVER_LIMIT.
var overLimit atomic.Int64

// caller makes one call; i numbers the caller's calls.
type caller func(ctx context.Context, r *rand.Rand) error

func run(c config) error {
	if c.descriptors < 1 || c.descriptors > 3 || c.conc < 1 || c.keys < 1 {
		return errors.New("--descriptors must be 1 to 3, --concurrency and --keys positive")
	}
	if c.zipf < 0 || math.IsNaN(c.zipf) {
		return errors.New("--zipf must be positive, or 0 for uniform")
	}
	if c.zipf > 0 {
		c.cdf = zipfCDF(c.keys, c.zipf)
	}
	call, closeFn, err := newCaller(c)
	if err != nil {
		return err
	}
	defer closeFn()
	if err := call(context.Background(), rand.New(rand.NewPCG(0, 0))); err != nil {
		return fmt.Errorf("first call: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.warmup)
	load(ctx, c, call, nil)
	cancel()

	var rdb *redis.Client
	var before redisCounts
	if c.redisAddr != "" {
		rdb = redis.NewClient(&redis.Options{Addr: c.redisAddr})
		defer rdb.Close()
		if before, err = readRedis(rdb); err != nil {
			return err
		}
	}
	cpu0, _ := cpuSeconds(c.pid)
	rcpu0, _ := cpuSeconds(c.redisPid)
	over0 := overLimit.Load()
	start := time.Now()
	ctx, cancel = context.WithTimeout(context.Background(), c.duration)
	lat := make([][]time.Duration, c.conc)
	errs := load(ctx, c, call, lat)
	cancel()
	elapsed := time.Since(start)
	cpu1, cpuErr := cpuSeconds(c.pid)
	rcpu1, rcpuErr := cpuSeconds(c.redisPid)
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	n := len(all)
	if n == 0 {
		return errors.New("no call completed")
	}
	fmt.Printf("%-22s %-6s desc=%d conc=%d  %9.0f decisions/s  p50 %6.2f ms  p99 %6.2f ms  errors %d",
		c.name, c.api, c.descriptors, c.conc, float64(n)/elapsed.Seconds(),
		ms(all[n/2]), ms(all[n*99/100]), errs)
	if c.pid > 0 && cpuErr == nil {
		fmt.Printf("  CPU %.1f s/M", (cpu1-cpu0)/float64(n)*1e6)
	}
	if c.redisPid > 0 && rcpuErr == nil {
		fmt.Printf("  Redis CPU %.1f s/M", (rcpu1-rcpu0)/float64(n)*1e6)
	}
	if c.api == "envoy" {
		// Calls answered after the end of the run count here and not in n:
		// a bound within a few calls of conc.
		fmt.Printf("  over limit %.1f%%", 100*float64(overLimit.Load()-over0)/float64(n))
	}
	if rdb != nil {
		after, err := readRedis(rdb)
		if err == nil {
			fmt.Printf("  Redis %.2f cmds/decision (%.2f client calls)",
				float64(after.calls-before.calls)/float64(n), float64(after.processed-before.processed)/float64(n))
		}
	}
	fmt.Println()
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// load runs c.conc callers until ctx ends, recording latencies when lat is
// not nil; it returns the number of failed calls.
func load(ctx context.Context, c config, call caller, lat [][]time.Duration) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := 0
	for g := range c.conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
			var mine []time.Duration
			bad := 0
			for ctx.Err() == nil {
				t0 := time.Now()
				if err := call(ctx, r); err != nil {
					// A call cut by the end of the run is not a failure.
					if dl, _ := ctx.Deadline(); ctx.Err() == nil && time.Now().Before(dl) {
						if bad++; bad == 1 && lat != nil {
							fmt.Fprintln(os.Stderr, "limiterbench: first failed call:", err)
						}
					}
					continue
				}
				if lat != nil {
					mine = append(mine, time.Since(t0))
				}
			}
			mu.Lock()
			errs += bad
			if lat != nil {
				lat[g] = mine
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return errs
}

// envoyRequest draws a request of c.descriptors descriptors.
func envoyRequest(c config, r *rand.Rand) *rlsv3.RateLimitRequest {
	user, tenant := draw(c, r)
	entry := func(k, v string) *rlv3.RateLimitDescriptor {
		return &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
	}
	req := &rlsv3.RateLimitRequest{Domain: "bench", HitsAddend: 1,
		Descriptors: []*rlv3.RateLimitDescriptor{entry("user", "u"+strconv.Itoa(user))}}
	if c.descriptors >= 2 {
		req.Descriptors = append(req.Descriptors, entry("tenant", "t"+strconv.Itoa(tenant)))
	}
	if c.descriptors >= 3 {
		req.Descriptors = append(req.Descriptors, entry("route", "/api/orders"))
	}
	return req
}

// draw picks a request's user and tenant.
func draw(c config, r *rand.Rand) (user, tenant int) {
	user = drawUser(c, r)
	if c.descriptors >= 2 {
		tenant = r.IntN(100)
	}
	return user, tenant
}

// drawUser picks a user: uniformly, or Zipf by rank with --zipf.
func drawUser(c config, r *rand.Rand) int {
	if c.cdf == nil {
		return r.IntN(c.keys)
	}
	return min(sort.SearchFloat64s(c.cdf, r.Float64()), len(c.cdf)-1)
}

// zipfCDF returns the cumulative probabilities of n ranks drawn with
// probability proportional to (k+1)^-s.
func zipfCDF(n int, s float64) []float64 {
	cdf := make([]float64, n)
	var sum float64
	for k := range cdf {
		sum += math.Pow(float64(k+1), -s)
		cdf[k] = sum
	}
	for k := range cdf {
		cdf[k] /= sum
	}
	return cdf
}

// jsonRequest appends to b the request envoyRequest would draw, in
// protobuf JSON, written directly rather than by protojson.Marshal so
// that the load generator takes less of the machine's CPU from the
// services it measures, the same for each.
func jsonRequest(b []byte, c config, r *rand.Rand) []byte {
	user, tenant := draw(c, r)
	b = append(b, `{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"u`...)
	b = strconv.AppendInt(b, int64(user), 10)
	b = append(b, `"}]}`...)
	if c.descriptors >= 2 {
		b = append(b, `,{"entries":[{"key":"tenant","value":"t`...)
		b = strconv.AppendInt(b, int64(tenant), 10)
		b = append(b, `"}]}`...)
	}
	if c.descriptors >= 3 {
		b = append(b, `,{"entries":[{"key":"route","value":"/api/orders"}]}`...)
	}
	return append(b, `],"hitsAddend":1}`...)
}

func newCaller(c config) (caller, func(), error) {
	switch c.api {
	case "envoy", "allow":
		cc, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, nil, err
		}
		closeFn := func() { cc.Close() }
		if c.api == "allow" {
			cl := ratelimiterv1.NewRateLimiterClient(cc)
			return func(ctx context.Context, r *rand.Rand) error {
				_, err := cl.Allow(ctx, &ratelimiterv1.AllowRequest{Key: "u" + strconv.Itoa(drawUser(c, r))})
				return err
			}, closeFn, nil
		}
		cl := rlsv3.NewRateLimitServiceClient(cc)
		return func(ctx context.Context, r *rand.Rand) error {
			resp, err := cl.ShouldRateLimit(ctx, envoyRequest(c, r))
			if err == nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
				overLimit.Add(1)
			}
			return err
		}, closeFn, nil
	case "json", "rest":
		hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 2 * c.conc, MaxIdleConnsPerHost: 2 * c.conc}}
		if c.api == "json" {
			url := "http://" + c.addr + "/json"
			return func(ctx context.Context, r *rand.Rand) error {
				return httpCall(ctx, hc, url, jsonRequest(nil, c, r), nil)
			}, hc.CloseIdleConnections, nil
		}
		return func(ctx context.Context, r *rand.Rand) error {
			return httpCall(ctx, hc, "http://"+c.addr+"/limit", nil, []string{"X-Client-Key", "u" + strconv.Itoa(drawUser(c, r))})
		}, hc.CloseIdleConnections, nil
	}
	return nil, nil, fmt.Errorf("unknown --api %q", c.api)
}

func httpCall(ctx context.Context, hc *http.Client, url string, body []byte, headers []string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// cpuSeconds is the user+system CPU time of process pid.
func cpuSeconds(pid int) (float64, error) {
	if pid <= 0 {
		return 0, errors.New("no pid")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: utime and stime are the 12th and 13th (clock ticks, 100 Hz).
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100, nil
}

// redisCounts are Redis's command counters: calls summed over INFO
// commandstats (commands run by scripts included) and
// total_commands_processed (the commands clients sent).
type redisCounts struct{ calls, processed int64 }

func readRedis(c *redis.Client) (redisCounts, error) {
	var rc redisCounts
	info, err := c.Info(context.Background(), "commandstats", "stats").Result()
	if err != nil {
		return rc, err
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "cmdstat_") && !strings.HasPrefix(line, "cmdstat_info:") {
			if i := strings.Index(line, "calls="); i >= 0 {
				v := line[i+len("calls="):]
				v = v[:strings.IndexByte(v, ',')]
				n, _ := strconv.ParseInt(v, 10, 64)
				rc.calls += n
			}
		}
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			rc.processed, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return rc, nil
}
