package limit_test

import (
	"testing"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/limit/limittest"
)

func memoryFactory(opts limit.MemoryOptions) limittest.Factory {
	return func(t *testing.T, clock limit.Clock, n int) []limit.Store {
		opts.Clock = clock
		m, err := limit.NewMemory(opts)
		if err != nil {
			t.Fatal(err)
		}
		stores := make([]limit.Store, n)
		for i := range stores {
			stores[i] = m
		}
		return stores
	}
}

func TestMemoryConformance(t *testing.T) {
	limittest.Run(t, memoryFactory(limit.MemoryOptions{}))
}

func TestMemoryConformanceOneShard(t *testing.T) {
	limittest.Run(t, memoryFactory(limit.MemoryOptions{Shards: 1, MaxKeys: 64}))
}
