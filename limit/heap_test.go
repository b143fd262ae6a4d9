package limit_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
)

func heapAlloc() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// BenchmarkMemoryHeapPerKey reports the heap held per active key (the
// slot and its share of the table's free space, which swings with how
// full the shards' tables are, and the store's copy of the key) and per
// key once every key is back at rest and Cleanup has run, for every
// algorithm at several key counts:
//
//	go test -run '^$' -bench MemoryHeapPerKey -benchtime 1x ./limit
func BenchmarkMemoryHeapPerKey(b *testing.B) {
	counts := []int{10_000, 100_000, 200_000, 500_000, 1 << 20, 2 << 20}
	keys := make([]string, counts[len(counts)-1])
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	for _, p := range []limit.Policy{limit.GCRA(limit.PerSecond(10), 10), limit.TokenBucket(10, limit.PerSecond(10)),
		limit.FixedWindow(10, time.Second), limit.SlidingWindow(10, time.Second), limit.RollingWindow(10, time.Second)} {
		for _, n := range counts {
			b.Run(string(p.Algorithm)+"/keys="+strconv.Itoa(n), func(b *testing.B) {
				for range b.N {
					clock := limittest.NewClock(limittest.Epoch)
					before := heapAlloc()
					m, _ := limit.NewMemory(limit.MemoryOptions{Clock: clock, MaxKeys: n})
					for _, k := range keys[:n] {
						m.AllowN(context.Background(), k, p, 1)
					}
					active := heapAlloc()
					clock.Advance(time.Hour)
					m.Cleanup()
					idle := heapAlloc()
					b.ReportMetric(float64(active-before)/float64(n), "B/active-key")
					b.ReportMetric(float64(idle-before)/float64(n), "B/idle-key")
					runtime.KeepAlive(m)
				}
			})
		}
	}
}

// TestStoredKeysAreCopies: the store holds its own copy of a key, so that a
// key cut from a large string (a request's whole header) does not keep
// that string alive: 200 keys cut from strings of 64 KiB hold far less
// than 200 * 64 KiB once the strings are gone.
func TestStoredKeysAreCopies(t *testing.T) {
	const n, size = 200, 64 << 10
	for _, p := range []limit.Policy{limit.GCRA(limit.PerSecond(10), 10), limit.RollingWindow(10, time.Second)} {
		t.Run(string(p.Algorithm), func(t *testing.T) {
			m, _ := limit.NewMemory(limit.MemoryOptions{Clock: limittest.NewClock(limittest.Epoch)})
			before := heapAlloc()
			for i := range n {
				big := strconv.Itoa(i) + "-" + string(make([]byte, size))
				key := big[:len(strconv.Itoa(i))+1]
				if _, err := m.AllowN(context.Background(), key, p, 1); err != nil {
					t.Fatal(err)
				}
			}
			held := heapAlloc() - before
			runtime.KeepAlive(m)
			if held > n*size/8 {
				t.Fatalf("%d keys hold %d bytes: the store keeps the strings they were cut from", n, held)
			}
		})
	}
}
