package batcher_test

import (
	"errors"
	"testing"
	"time"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/batchertest"
)

// FuzzEnqueueValidation feeds arbitrary costs, attempts, limits and settings
// to Enqueue and Start: every call must either succeed or return one of the
// documented errors, never panic, and a refused op must change nothing.
func FuzzEnqueueValidation(f *testing.F) {
	f.Add(uint32(10), uint32(100), uint32(0), uint32(0), uint32(5), true, int64(100))
	f.Add(uint32(101), uint32(100), uint32(1), uint32(1), uint32(0), false, int64(0))
	f.Add(uint32(0), uint32(0), uint32(3), uint32(2), uint32(1), true, int64(-1))
	f.Fuzz(func(t *testing.T, cost, maxCap, attempts, maxAttempts, buffer uint32, batchable bool, flushMs int64) {
		lim := batchertest.NewLimiter(maxCap)
		b := batcher.New(buffer % 64).WithErrorOnFullBuffer().WithRateLimiter(lim).
			WithFlushInterval(time.Duration(flushMs) * time.Millisecond)
		w := batcher.NewWatcher(func([]batcher.IOperation) {}).WithMaxAttempts(maxAttempts % 8)
		op := batcher.NewOperation(w, cost, nil, batchable)
		for i := uint32(0); i < attempts%8; i++ {
			op.MakeAttempt()
		}
		beforeBuf, beforeTarget := b.OperationsInBuffer(), b.NeedsCapacity()
		err := b.Enqueue(op)
		switch {
		case err == nil:
			if b.OperationsInBuffer() != beforeBuf+1 || b.NeedsCapacity() != beforeTarget+cost {
				t.Fatalf("accepted op not counted: buffer %d target %d", b.OperationsInBuffer(), b.NeedsCapacity())
			}
		case errors.As(err, new(batcher.TooExpensiveError)) && cost > maxCap,
			errors.As(err, new(batcher.TooManyAttemptsError)) && maxAttempts%8 > 0 && attempts%8 >= maxAttempts%8,
			errors.As(err, new(batcher.BufferNotAllocated)) && buffer%64 == 0,
			errors.As(err, new(batcher.BufferFullError)):
			if b.OperationsInBuffer() != beforeBuf || b.NeedsCapacity() != beforeTarget {
				t.Fatalf("refused op changed the counters: %v", err)
			}
		default:
			t.Fatalf("unexpected result %v (cost %d max %d attempts %d/%d buffer %d)", err, cost, maxCap, attempts%8, maxAttempts%8, buffer%64)
		}
		startErr := b.Start()
		if flushMs <= 0 && !errors.As(startErr, new(batcher.InvalidSettingError)) {
			t.Fatalf("Start accepted flush interval %d ms: %v", flushMs, startErr)
		}
		if flushMs > 0 && startErr != nil {
			t.Fatalf("Start: %v", startErr)
		}
		b.Stop()
	})
}
