package batcher

import (
	"sync"
	"testing"

	"github.com/costwise/batcher/internal/events"
)

// TestEventQueueEmptyDelivery checks that a delivery that finds the queue
// empty leaves the two slices apart: pushes that follow must not write into
// the array the next delivery reads (the race detector catches it), and
// every event arrives once, in order.
func TestEventQueueEmptyDelivery(t *testing.T) {
	q := &eventQueue{notify: make(chan struct{}, 1)}
	var reg events.Registry
	var got []int
	reg.Add(func(_ string, val int, _ string, _ interface{}) { got = append(got, val) })
	const first = 64 // room in the array the first delivery leaves spare
	for i := 0; i < first; i++ {
		q.push(event{val: i})
	}
	q.deliver(&reg) // delivers them, then finds the queue empty
	q.deliver(&reg) // finds it empty again
	const n = 20000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := first; i <= n; i++ {
			q.push(event{val: i})
		}
	}()
	for len(got) <= n {
		q.deliver(&reg)
		select {
		case <-q.notify:
		default:
		}
	}
	wg.Wait()
	for i, v := range got {
		if v != i {
			t.Fatalf("event %d delivered as %d; want every event once, in order", i, v)
		}
	}
}
