package prometheus_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/costwise/batcher"
	batcherprom "github.com/costwise/batcher/metrics/prometheus"
)

// The benchmarks run the workload of the root package's BenchmarkThroughput
// with one producer (no rate limiter, a trivial callback, MaxBatchSize 100),
// plain and instrumented: a BatcherCollector registered as the observer and
// the registry scraped through promhttp every 100 ms while the run lasts.

// BenchmarkThroughputMetrics reports ops/s of each variant, for benchstat.
func BenchmarkThroughputMetrics(b *testing.B) {
	for _, instrument := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "metrics"}[instrument]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			r, err := workload(b.N, instrument, b.ResetTimer)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/r.elapsed.Seconds(), "ops/s")
		})
	}
}

// BenchmarkMetricsOverhead runs b.N rounds of 2,000,000 operations, each
// round both variants in alternating order so that load from other
// processes hits both alike, and reports the medians over rounds of the
// instrumented run's extra wall time and extra CPU time (user plus system,
// of the whole process) in percent; negative values are noise:
//
//	go test -run '^$' -bench MetricsOverhead -benchtime 15x ./metrics/prometheus/
func BenchmarkMetricsOverhead(b *testing.B) {
	const ops = 2_000_000
	var wall, cpu, plain, instrumented, scrapes []float64
	for i := 0; i < b.N; i++ {
		var r [2]workloadResult
		for j := 0; j < 2; j++ {
			instrument := (i+j)%2 == 1
			res, err := workload(ops, instrument, func() {})
			if err != nil {
				b.Fatal(err)
			}
			r[boolIndex(instrument)] = res
		}
		wall = append(wall, percentMore(r[1].elapsed, r[0].elapsed))
		cpu = append(cpu, percentMore(r[1].cpu, r[0].cpu))
		plain = append(plain, ops/r[0].elapsed.Seconds())
		instrumented = append(instrumented, ops/r[1].elapsed.Seconds())
		scrapes = append(scrapes, float64(r[1].scrapes))
	}
	b.ReportMetric(median(wall), "wall_overhead_%")
	if cpuTime() > 0 {
		b.ReportMetric(median(cpu), "cpu_overhead_%")
	}
	b.ReportMetric(median(plain), "plain_ops/s")
	b.ReportMetric(median(instrumented), "metrics_ops/s")
	b.ReportMetric(median(scrapes), "scrapes/run")
}

// percentMore is how much longer a is than base, in percent.
func percentMore(a, base time.Duration) float64 {
	if base <= 0 {
		return 0
	}
	return 100 * (a.Seconds() - base.Seconds()) / base.Seconds()
}

func boolIndex(v bool) int {
	if v {
		return 1
	}
	return 0
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

type workloadResult struct {
	elapsed time.Duration // wall time
	cpu     time.Duration // process CPU time
	scrapes int64
}

// workload enqueues n operations from one producer and waits until the
// batcher has delivered them all, timing from the first Enqueue to the end
// of Shutdown; ready is called just before the clock starts.
func workload(n int, instrument bool, ready func()) (workloadResult, error) {
	bt := batcher.New(batcher.DefaultBufferSize)
	var scrapes atomic.Int64
	stopScraping := func() {}
	if instrument {
		reg := prom.NewRegistry()
		if _, err := batcherprom.Register(reg, bt, batcherprom.Options{ConstLabels: prom.Labels{"name": "bench"}}); err != nil {
			return workloadResult{}, err
		}
		stopScraping = scrapeEvery(reg, 100*time.Millisecond, &scrapes)
	}
	defer stopScraping()
	if err := bt.Start(); err != nil {
		return workloadResult{}, err
	}
	var delivered atomic.Int64
	w := batcher.NewWatcher(func(ops []batcher.IOperation) { delivered.Add(int64(len(ops))) }).WithMaxBatchSize(100)
	ready()
	start, startCPU := time.Now(), cpuTime()
	for i := 0; i < n; i++ {
		if err := bt.Enqueue(batcher.NewOperation(w, 1, nil, true)); err != nil {
			return workloadResult{}, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := bt.Shutdown(ctx)
	r := workloadResult{elapsed: time.Since(start), cpu: cpuTime() - startCPU}
	stopScraping()
	r.scrapes = scrapes.Load()
	if err != nil {
		return r, err
	}
	if got := delivered.Load(); got != int64(n) {
		return r, fmt.Errorf("delivered %d of %d", got, n)
	}
	return r, nil
}

// scrapeEvery scrapes reg through promhttp every interval until the
// returned function is first called; that call waits for the goroutine to
// end, later ones do nothing.
func scrapeEvery(reg *prom.Registry, interval time.Duration, count *atomic.Int64) (stop func()) {
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	scrape := func() {
		rr := httptest.NewRecorder()
		h.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		count.Add(1)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				scrape()
			case <-done:
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
	}
}

// BenchmarkObserveBatch is the per-batch cost the collector adds on the
// batcher's loop goroutine; divide by the batch size for the cost per
// operation.
func BenchmarkObserveBatch(b *testing.B) {
	c := batcherprom.NewBatcherCollector(batcher.New(10), batcherprom.Options{})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		c.ObserveBatch(100, 100, time.Duration(i%1000)*time.Microsecond)
	}
}

// BenchmarkScrape is the cost of one scrape of a batcher and a shared
// resource through promhttp; at one scrape per 100 ms its share of one core
// is this time divided by 100 ms.
func BenchmarkScrape(b *testing.B) {
	bt := batcher.New(10)
	r := batcher.NewSharedResource(batcher.NewMemoryLeaseManager(), 1000)
	reg := prom.NewRegistry()
	if _, err := batcherprom.Register(reg, bt, batcherprom.Options{}); err != nil {
		b.Fatal(err)
	}
	if _, err := batcherprom.RegisterLimiter(reg, r, batcherprom.Options{}); err != nil {
		b.Fatal(err)
	}
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		rr := httptest.NewRecorder()
		h.ServeHTTP(rr, req)
		if rr.Code != http.StatusOK {
			b.Fatalf("status %d", rr.Code)
		}
	}
}
