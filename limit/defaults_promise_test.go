//go:build !race

// A million keys take 15 s and 1.2 GB under the race detector, and nothing
// here is concurrent: the test runs without it.

package limit_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
)

// TestMemoryDefaultMaxKeysEvicts: the zero MemoryOptions hold at most
// 1,048,576 keys, and at that bound a new key evicts one that spent (no
// key is at rest), counted in Stats().Evicted, rather than being refused:
// "256 shards, 1,048,576 keys, LRU when full".
func TestMemoryDefaultMaxKeysEvicts(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a store with a million keys")
	}
	const maxKeys = 1 << 20
	ctx := context.Background()
	m := newMemory(t, limit.MemoryOptions{Clock: limittest.NewClock(limittest.Epoch)})
	p := limit.FixedWindow(10, time.Hour)
	buf := make([]byte, 0, 16)
	for i := 0; i < maxKeys; i++ {
		buf = strconv.AppendInt(buf[:0], int64(i), 10)
		if d, err := m.AllowN(ctx, string(buf), p, 1); err != nil || !d.Allowed {
			t.Fatalf("key %d of %d: %+v %v", i, maxKeys, d, err)
		}
	}
	if st := m.Stats(); st.Keys != maxKeys || st.Evicted != 0 || st.Refused != 0 {
		t.Fatalf("after %d keys: %+v; want them all held", maxKeys, st)
	}
	for i := 0; i < 3; i++ {
		d, err := m.AllowN(ctx, "new-"+strconv.Itoa(i), p, 1)
		if err != nil || !d.Allowed || d.Remaining != 9 {
			t.Fatalf("new key %d past the bound: %+v %v; want admitted (EvictLRU, not refused)", i, d, err)
		}
	}
	if st := m.Stats(); st.Keys != maxKeys || st.Evicted != 3 || st.Refused != 0 {
		t.Fatalf("after 3 keys past the bound: %+v; want %d keys held, 3 evicted", st, maxKeys)
	}
}
