package batcher

import (
	"container/heap"
	"sync"
	"sync/atomic"
)

// Priority is a watcher's class under fair release (see
// Batcher.WithFairRelease and Watcher.WithPriority).
type Priority uint8

// The priority classes. While both have batches ready, PriorityLow gets
// LowPriorityShare of the released cost and PriorityHigh the rest; while
// only one has, it gets everything.
const (
	PriorityHigh Priority = iota // the default
	PriorityLow
	numPriorities
)

// LowPriorityShare is the part of the released cost, in percent, that the
// low priority class is guaranteed while the high class also has batches
// ready: it is what keeps a low-priority watcher from waiting forever
// behind a high-priority backlog.
const LowPriorityShare = 2

// lowWeight is how many units of cost the high class may release for each
// unit the low class is owed: 98 to 2.
const lowWeight = (100 - LowPriorityShare) / LowPriorityShare

// String returns "high" or "low", as used in metric labels.
func (p Priority) String() string {
	if p == PriorityHigh {
		return "high"
	}
	return "low"
}

// FairWatcher is an IWatcher that states its weight, priority class and
// name for fair release. *Watcher implements it (WithWeight, WithPriority,
// WithName). A watcher that does not is released with weight 1, in
// PriorityHigh, without a name.
type FairWatcher interface {
	IWatcher
	Weight() uint32
	Priority() Priority
	Name() string
}

// flow is the queue of one watcher's ready batches under fair release,
// with its start tag: the virtual time at which its next batch starts.
type flow struct {
	w      IWatcher
	weight float64
	class  Priority
	tag    float64
	seq    uint64 // order of arrival, which breaks ties between equal tags
	index  int    // in its class's heap
	queue  []*pending
	head   int
	named  *releaseCounter // nil for a watcher without a name
}

// fairQueue holds the ready batches under fair release. Within a priority
// class it is start-time fair queuing by cost: each flow (watcher) has a
// start tag in virtual time; the flow with the smallest tag goes next, and
// releasing cost c advances its tag by c ÷ weight. A flow that becomes
// ready starts at the class's virtual time, the tag of the batch released
// last, so a watcher earns nothing while it has nothing ready and a new one
// waits for at most one batch of every other flow. Over any span in which
// two flows stay ready, the cost each gets divided by its weight differs by
// at most one batch (or one quantum, see the loop's split at a flush) of
// each. Between the classes it is weighted round robin by cost with the
// weights 98:2 (LowPriorityShare), counted only while both have batches
// ready, so low priority waits while high has work but never forever.
//
// Flows exist only while they have batches ready: a batcher serving
// short-lived watchers keeps no state for the watchers gone.
//
// It is owned by the batcher's loop goroutine.
type fairQueue struct {
	flows   map[IWatcher]*flow
	classes [numPriorities]flowHeap
	vtime   [numPriorities]float64
	lowDue  int64 // > 0: the low class is owed capacity; in units of cost ÷ lowWeight
	seq     uint64
	batches int
	spare   []*flow
	stats   *fairCounters
}

func newFairQueue(stats *fairCounters) *fairQueue {
	return &fairQueue{flows: make(map[IWatcher]*flow), stats: stats}
}

// push appends a ready batch to its watcher's flow.
func (q *fairQueue) push(p *pending) {
	f := q.flows[p.w]
	if f == nil {
		f = q.newFlow(p.w)
		q.flows[p.w] = f
		heap.Push(&q.classes[f.class], f)
	}
	f.queue = append(f.queue, p)
	q.batches++
}

// newFlow returns an empty flow for w starting at its class's virtual time.
func (q *fairQueue) newFlow(w IWatcher) *flow {
	var f *flow
	if n := len(q.spare); n > 0 {
		f, q.spare = q.spare[n-1], q.spare[:n-1]
	} else {
		f = &flow{}
	}
	f.w, f.weight, f.class, f.named = w, 1, PriorityHigh, nil
	if fw, ok := w.(FairWatcher); ok {
		f.weight = float64(max(fw.Weight(), 1))
		f.class = min(fw.Priority(), PriorityLow)
		if name := fw.Name(); name != "" && q.stats != nil {
			f.named = q.stats.named(name)
		}
	}
	f.tag = q.vtime[f.class]
	q.seq++
	f.seq = q.seq
	return f
}

// len returns the number of ready batches.
func (q *fairQueue) len() int { return q.batches }

// active returns the number of watchers with batches ready.
func (q *fairQueue) active() int { return len(q.flows) }

// front returns the batch to release next, or nil when none is ready.
func (q *fairQueue) front() *pending {
	c, ok := q.pick()
	if !ok {
		return nil
	}
	f := q.classes[c][0]
	return f.queue[f.head]
}

// pick returns the class to serve next.
func (q *fairQueue) pick() (Priority, bool) {
	high, low := len(q.classes[PriorityHigh]) > 0, len(q.classes[PriorityLow]) > 0
	switch {
	case high && low:
		if q.lowDue > 0 {
			return PriorityLow, true
		}
		return PriorityHigh, true
	case high:
		return PriorityHigh, true
	case low:
		return PriorityLow, true
	}
	return 0, false
}

// released records that ops operations of the given cost were just
// released from p, the head of its flow, and drops p once it is empty.
func (q *fairQueue) released(p *pending, ops int, cost uint64) {
	f := q.flows[p.w]
	if f == nil || f.queue[f.head] != p {
		return // not queued here: nothing to account
	}
	q.count(f, ops, cost)
	if cost > 0 {
		both := len(q.classes[PriorityHigh]) > 0 && len(q.classes[PriorityLow]) > 0
		if both && f.class == PriorityHigh {
			q.lowDue += int64(min(cost, 1<<40))
		} else if both {
			q.lowDue -= int64(min(cost, 1<<40)) * lowWeight
		}
		q.vtime[f.class] = max(q.vtime[f.class], f.tag)
		f.tag += float64(cost) / f.weight
	}
	if len(p.ops) > 0 {
		heap.Fix(&q.classes[f.class], f.index)
		return
	}
	f.queue[f.head] = nil
	f.head++
	q.batches--
	if f.head < len(f.queue) {
		heap.Fix(&q.classes[f.class], f.index)
		return
	}
	q.drop(f)
}

// drop forgets a flow that has nothing ready.
func (q *fairQueue) drop(f *flow) {
	heap.Remove(&q.classes[f.class], f.index)
	delete(q.flows, f.w)
	if len(q.classes[f.class]) == 0 {
		q.vtime[f.class] = 0 // nothing carries a tag of this class any more
	}
	if len(q.classes[PriorityHigh]) == 0 || len(q.classes[PriorityLow]) == 0 {
		q.lowDue = 0 // owed only while both wait
	}
	clear(f.queue)
	*f = flow{queue: f.queue[:0]}
	if len(q.spare) < 64 {
		q.spare = append(q.spare, f)
	}
}

// count adds a release to the per-class and per-name counters.
func (q *fairQueue) count(f *flow, ops int, cost uint64) {
	if q.stats == nil {
		return
	}
	q.stats.class[f.class].add(ops, cost)
	if f.named != nil {
		f.named.add(ops, cost)
	}
}

// heads calls fn with the first ready batch of every flow, and again with
// the next while fn returns true (having released the one before: see
// released) and the flow has more.
func (q *fairQueue) heads(fn func(p *pending) bool) {
	for w, f := range q.flows {
		for q.flows[w] == f && f.head < len(f.queue) && fn(f.queue[f.head]) {
		}
	}
}

// flowHeap orders the flows of one class by start tag, then arrival.
type flowHeap []*flow

func (h flowHeap) Len() int { return len(h) }
func (h flowHeap) Less(i, j int) bool {
	if h[i].tag != h[j].tag {
		return h[i].tag < h[j].tag
	}
	return h[i].seq < h[j].seq
}
func (h flowHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *flowHeap) Push(x any) {
	f := x.(*flow)
	f.index = len(*h)
	*h = append(*h, f)
}
func (h *flowHeap) Pop() any {
	old := *h
	f := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return f
}

// releaseCounter counts the operations, cost and batches released for one
// class or name. The loop adds; Stats reads.
type releaseCounter struct {
	ops, cost, batches atomic.Uint64
}

func (c *releaseCounter) add(ops int, cost uint64) {
	c.ops.Add(uint64(ops))
	c.cost.Add(cost)
	c.batches.Add(1)
}

func (c *releaseCounter) load() ReleaseCount {
	return ReleaseCount{Operations: c.ops.Load(), Cost: c.cost.Load(), Batches: c.batches.Load()}
}

// MaxWatcherNames is how many distinct watcher names fair release counts
// apart (see Watcher.WithName); the releases of the names seen after the
// first MaxWatcherNames add up under OtherWatchers, so that a name per
// request cannot grow the counters, or a metric's label set, without bound.
const MaxWatcherNames = 100

// OtherWatchers is the key in Stats().Watchers under which the releases of
// names beyond MaxWatcherNames are counted.
const OtherWatchers = "other"

// fairCounters are the release counters of fair release.
type fairCounters struct {
	class [numPriorities]releaseCounter
	mu    sync.Mutex // guards names
	names map[string]*releaseCounter
	other releaseCounter
}

// named returns the counter of a watcher name, making it if there is room.
func (c *fairCounters) named(name string) *releaseCounter {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.names[name]; ok {
		return r
	}
	if len(c.names) >= MaxWatcherNames {
		return &c.other
	}
	if c.names == nil {
		c.names = make(map[string]*releaseCounter)
	}
	r := new(releaseCounter)
	c.names[name] = r
	return r
}

// ReleaseCount is what fair release counts per priority class and per
// watcher name: operations, their cost and batches released.
type ReleaseCount struct {
	Operations uint64
	Cost       uint64
	Batches    uint64
}

// snapshot returns the counters by class name and by watcher name.
func (c *fairCounters) snapshot() (classes, names map[string]ReleaseCount) {
	classes = make(map[string]ReleaseCount, numPriorities)
	for i := range c.class {
		classes[Priority(i).String()] = c.class[i].load()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	names = make(map[string]ReleaseCount, len(c.names)+1)
	for name, r := range c.names {
		names[name] = r.load()
	}
	if len(c.names) >= MaxWatcherNames {
		o := c.other.load()
		n := names[OtherWatchers] // a watcher may be named "other" too
		names[OtherWatchers] = ReleaseCount{n.Operations + o.Operations, n.Cost + o.Cost, n.Batches + o.Batches}
	}
	return classes, names
}

// fairSplit is how many pieces one flush interval's worth of capacity is
// cut into under fair release while several watchers have batches ready.
const fairSplit = 16

// quantum returns the most cost one release from a batch may take, or 0 for
// no limit. Under fair release with several watchers ready it is a
// sixteenth of a flush interval's worth of capacity (at least one
// operation): a watcher with large batches then takes the credit in turns
// with the others in pieces small enough that every watcher's share holds
// over a few seconds, not only in the long run, and that the release is as
// smooth as with small batches.
func (l *loop) quantum() uint64 {
	if l.ready.watchers() < 2 {
		return 0
	}
	return max(satMulU(uint64(l.capacity), uint64(l.cfg.flushInterval))/uint64(nanoPerCost)/fairSplit, 1)
}

// prefixCost returns the cost of the operations at the front of p that one
// release takes with the given quantum: all of p when quantum is 0 or p costs
// no more, else the shortest prefix that reaches the quantum.
func prefixCost(p *pending, quantum uint64) uint64 {
	if quantum == 0 || p.cost <= quantum {
		return p.cost
	}
	var sum uint64
	for _, op := range p.ops {
		sum += uint64(op.Cost())
		if sum >= quantum {
			break
		}
	}
	return sum
}
