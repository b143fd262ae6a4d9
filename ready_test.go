package batcher

import (
	"fmt"
	"slices"
	"testing"
)

// readyBatch returns a batch for w with one operation per cost, its payload
// the operation's index.
func readyBatch(w IWatcher, costs ...uint32) *pending {
	p := &pending{w: w}
	for i, c := range costs {
		p.ops = append(p.ops, NewOperation(w, c, i, true))
		p.cost += uint64(c)
	}
	return p
}

// releaseAll takes whole batches from the front while any is ready and
// returns the watchers' names in release order.
func releaseAll(q *readyQueue) []string {
	var out []string
	for p := q.front(); p != nil; p = q.front() {
		if len(p.ops) > 0 {
			q.take(p, len(p.ops))
			out = append(out, p.w.(*Watcher).Name())
		}
		q.done(p)
	}
	q.compact()
	return out
}

func named(name string) *Watcher { return NewWatcher(noop).(*Watcher).WithName(name) }

// TestReadyQueueSteps drives the queue in closing order and under fair
// release through the same steps: push, a partial take, the release of
// free batches past a waiting head, and whole releases.
func TestReadyQueueSteps(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprint("fair=", fair), func(t *testing.T) {
			var stats fairCounters
			q := newReadyQueue(fair, &stats)
			a, b, c := named("a"), named("b"), named("c")
			if q.isFair() != fair || q.front() != nil || q.len() != 0 {
				t.Fatalf("new queue: fair %v, front %v, len %d", q.isFair(), q.front(), q.len())
			}
			head := readyBatch(a, 3, 4, 5)
			q.push(head)
			q.push(readyBatch(b, 0, 0)) // free, another watcher: may pass a's head
			q.push(readyBatch(a, 0))    // free, but behind a's waiting batch
			q.push(readyBatch(c, 2))
			if q.len() != 4 || q.front() != head {
				t.Fatalf("after 4 pushes: len %d, front %v; want 4, a's first batch", q.len(), q.front())
			}
			wantWatchers := 0
			if fair {
				wantWatchers = 3
			}
			if got := q.watchers(); got != wantWatchers {
				t.Fatalf("watchers() = %d, want %d", got, wantWatchers)
			}

			ops, cost := q.take(head, 2) // the credit pays for a prefix
			if len(ops) != 2 || cost != 7 || head.cost != 5 || len(head.ops) != 1 {
				t.Fatalf("take 2 of (3,4,5): %d ops of cost %d, %d left of cost %d; want 2 of 7, 1 of 5", len(ops), cost, len(head.ops), head.cost)
			}
			q.done(head)
			if !fair && q.front() != head {
				t.Fatal("in closing order, a batch with operations left is no longer the front")
			}

			var passed []string
			q.eachFree(func(p *pending) bool {
				passed = append(passed, p.w.(*Watcher).Name())
				q.take(p, len(p.ops))
				return true
			})
			if !slices.Equal(passed, []string{"b"}) {
				t.Fatalf("free batches past the waiting head: %v, want [b] (a's own waits behind its head)", passed)
			}

			got := releaseAll(&q)
			want := []string{"a", "a", "c"} // in closing order: a's head, a's free batch, c
			if fair {
				want = []string{"c", "a", "a"} // a's tag moved by the 7 it took: c, still at 0, goes first
			}
			if !slices.Equal(got, want) {
				t.Fatalf("release order %v, want %v", got, want)
			}
			if q.len() != 0 || q.front() != nil || q.watchers() != 0 {
				t.Fatalf("after releasing everything: len %d, watchers %d", q.len(), q.watchers())
			}
			if fair && stats.class[PriorityHigh].load().Cost != 14 {
				t.Fatalf("fair counters: %+v, want cost 14", stats.class[PriorityHigh].load())
			}
		})
	}
}

// TestReadyQueueFreeCount: with no batch of zero cost ready, eachFree looks
// at nothing.
func TestReadyQueueFreeCount(t *testing.T) {
	q := newReadyQueue(false, nil)
	w := named("w")
	q.push(readyBatch(w, 1))
	q.push(readyBatch(w, 0))
	p := q.front()
	q.take(p, 1)
	q.done(p)
	free := q.front()
	q.take(free, 1) // the free batch goes: none is left
	q.done(free)
	q.push(readyBatch(w, 1))
	q.eachFree(func(p *pending) bool {
		t.Fatalf("eachFree called with a batch of cost %d", p.cost)
		return false
	})
	if q.free != 0 {
		t.Fatalf("free = %d after the free batch went, want 0", q.free)
	}
}

// TestReadyQueueCompact: released entries are dropped at once when the queue
// empties, and otherwise only once they are more than 1,024 and most of it;
// the order of what is left is kept.
func TestReadyQueueCompact(t *testing.T) {
	q := newReadyQueue(false, nil)
	w := named("w")
	const n = 3000
	for i := 0; i < n; i++ {
		q.push(readyBatch(w, uint32(i+1)))
	}
	steps := []struct {
		release  int
		wantHead int
		wantLen  int // of the backing slice
	}{
		{1000, 1000, n},    // not more than 1,024 released: kept
		{500, 1500, n},     // 1,500 of 3,000: not most of it
		{1, 0, n - 1501},   // 1,501 of 3,000: dropped
		{1000, 1000, 1499}, // 1,000: kept
		{499, 0, 0},        // empty: reset
	}
	for i, s := range steps {
		for k := 0; k < s.release; k++ {
			p := q.front()
			q.take(p, 1)
			q.done(p)
		}
		q.compact()
		if q.head != s.wantHead || len(q.fifo) != s.wantLen {
			t.Fatalf("step %d: head %d, %d entries; want %d, %d", i, q.head, len(q.fifo), s.wantHead, s.wantLen)
		}
		if q.len() > 0 && q.front().cost != uint64(n-q.len()+1) {
			t.Fatalf("step %d: front costs %d, want %d (order lost)", i, q.front().cost, n-q.len()+1)
		}
	}
}
