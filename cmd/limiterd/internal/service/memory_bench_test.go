package service

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costwise/batcher/internal/redistest"
)

// BenchmarkMemoryPerKey runs limiterd in memory with a bucket that takes
// 10,000 s to refill (so that no key comes back to rest), sends POST
// /limit with 1,000,000 distinct 16-byte keys over 16 keep-alive
// connections, and reports the live heap and the resident memory each key
// adds, at limiterd's GOGC of 400:
//
//	go test -run '^$' -bench MemoryPerKey -benchtime 1x ./cmd/limiterd/internal/service/
func BenchmarkMemoryPerKey(b *testing.B) {
	const n = 1_000_000
	old := debugSetGCPercent(400)
	defer debugSetGCPercent(old)
	for range b.N {
		httpAddr := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(b))
		cfg, err := ParseConfig("bench.yaml", []byte("algo_settings: {capacity: 10, rate: 0.001}\n"))
		if err != nil {
			b.Fatal(err)
		}
		cfg.HTTPAddr, cfg.GRPCAddr, cfg.MetricsAddr = httpAddr, "127.0.0.1:0", ""
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- Run(ctx, cfg) }()
		waitListening(b, httpAddr)
		heap0, rss0 := liveHeap(), rss(b)
		sendKeys(b, httpAddr, n, 16)
		heap1, rss1 := liveHeap(), rss(b)
		b.ReportMetric(float64(heap1-heap0)/n, "heap-B/key")
		b.ReportMetric(float64(rss1-rss0)/n, "rss-B/key")
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}

func waitListening(tb testing.TB, addr string) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			tb.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sendKeys sends n POST /limit requests with distinct keys of keyLen
// bytes, 64 pipelined at a time on each of 16 connections.
func sendKeys(tb testing.TB, addr string, n, keyLen int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				tb.Error(err)
				return
			}
			defer conn.Close()
			br := bufio.NewReader(conn)
			for {
				var sb strings.Builder
				k := 0
				for ; k < 64; k++ {
					i := next.Add(1)
					if i > int64(n) {
						break
					}
					fmt.Fprintf(&sb, "POST /limit HTTP/1.1\r\nHost: x\r\nX-Client-Key: %0*d\r\n\r\n", keyLen, i)
				}
				if k == 0 {
					return
				}
				if _, err := io.WriteString(conn, sb.String()); err != nil {
					tb.Error(err)
					return
				}
				for range k {
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						tb.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
	wg.Wait()
}

func liveHeap() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// rss is the process's resident memory, from /proc.
func rss(tb testing.TB) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	tb.Fatal("no VmRSS")
	return 0
}

func debugSetGCPercent(p int) int { return debug.SetGCPercent(p) }
