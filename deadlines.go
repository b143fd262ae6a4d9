package batcher

import (
	"container/heap"
	"sync/atomic"
	"time"
)

// inflightBatch is a released batch whose cost still counts in the target.
// It is done, exactly once, when its callback returns or its deadline passes.
type inflightBatch struct {
	cost     int64
	deadline time.Time
	done     atomic.Bool
}

// deadlines is a min-heap of in-flight batches by deadline. Batches whose
// callback returned stay in it until they reach the top or the heap is
// compacted, which keeps completion free of any lock or channel.
//
// It is owned by the batcher's loop goroutine.
type deadlines []*inflightBatch

func (d deadlines) Len() int           { return len(d) }
func (d deadlines) Less(i, j int) bool { return d[i].deadline.Before(d[j].deadline) }
func (d deadlines) Swap(i, j int)      { d[i], d[j] = d[j], d[i] }
func (d *deadlines) Push(x any)        { *d = append(*d, x.(*inflightBatch)) }
func (d *deadlines) Pop() any {
	old := *d
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*d = old[:len(old)-1]
	return x
}

// add records a batch; when more than half the heap is finished batches it
// drops them in one pass, so the heap stays proportional to live batches.
func (d *deadlines) add(b *inflightBatch, live int) {
	if len(*d) > 2*live+1024 {
		kept := (*d)[:0]
		for _, x := range *d {
			if !x.done.Load() {
				kept = append(kept, x)
			}
		}
		clear((*d)[len(kept):])
		*d = kept
		heap.Init(d)
	}
	heap.Push(d, b)
}

// expire calls finish for every batch whose deadline is at or before now and
// drops finished batches from the top; it returns the next live deadline.
func (d *deadlines) expire(now time.Time, finish func(*inflightBatch)) (next time.Time, ok bool) {
	for len(*d) > 0 {
		top := (*d)[0]
		if top.done.Load() {
			heap.Pop(d)
			continue
		}
		if top.deadline.After(now) {
			return top.deadline, true
		}
		heap.Pop(d)
		finish(top)
	}
	return time.Time{}, false
}
