package batcher

import "sync/atomic"

// IOperation is a unit of work enqueued into a Batcher: a payload with a cost,
// a watcher to deliver it to, whether it may share a batch with others, and
// how many times it has been attempted.
type IOperation interface {
	Payload() interface{}
	Attempt() uint32
	Cost() uint32
	Watcher() IWatcher
	IsBatchable() bool
	MakeAttempt()
}

// Operation is the IOperation made by NewOperation. Its attempt counter is
// safe for concurrent use; the other fields never change.
type Operation struct {
	watcher   IWatcher
	cost      uint32
	payload   interface{}
	batchable bool
	frozen    bool // a custom operation as Enqueue read it; payload holds it (see freeze)
	attempt   atomic.Uint32
	actual    atomic.Uint64 // actualKnown | cost, set by SetActualCost; 0 when unset
}

// NewOperation returns an operation of the given cost carrying payload, to be
// delivered to watcher. A batchable operation may be grouped with other
// batchable operations of the same watcher; otherwise it is delivered alone.
func NewOperation(watcher IWatcher, cost uint32, payload interface{}, batchable bool) IOperation {
	return &Operation{watcher: watcher, cost: cost, payload: payload, batchable: batchable}
}

// Payload returns the payload given to NewOperation.
func (o *Operation) Payload() interface{} { return o.payload }

// Attempt returns how many times the operation has been delivered in a batch.
func (o *Operation) Attempt() uint32 { return o.attempt.Load() }

// Cost returns the cost given to NewOperation.
func (o *Operation) Cost() uint32 { return o.cost }

// Watcher returns the watcher the operation is delivered to.
func (o *Operation) Watcher() IWatcher { return o.watcher }

// IsBatchable reports whether the operation may share a batch.
func (o *Operation) IsBatchable() bool { return o.batchable }

// MakeAttempt increments the attempt counter. The Batcher calls it just before
// the operation's batch is handed to the watcher.
func (o *Operation) MakeAttempt() { o.attempt.Add(1) }

// freeze returns op as Enqueue accepts it, as an *Operation, so that the
// hand-over between Enqueue and the loop can hold one pointer per operation
// (8 bytes) instead of an interface value (16). An *Operation is returned
// unchanged, and a nil op as a nil pointer: operations made by NewOperation
// cannot change and cost no allocation. A custom operation is read once,
// here: it is wrapped in an *Operation marked frozen that carries the
// watcher, cost and batchability it gives now, and itself as payload. The
// loop uses those values only, so that an operation whose methods answer
// differently later (a nil watcher, a lower cost) can neither crash the
// loop nor leave its cost in the target. The watcher is handed the
// operation itself, never the wrapper (see thaw).
func freeze(op IOperation) *Operation {
	switch o := op.(type) {
	case nil:
		return nil
	case *Operation:
		return o
	}
	return &Operation{watcher: op.Watcher(), cost: op.Cost(), payload: op, batchable: op.IsBatchable(), frozen: true}
}

// original returns the operation the caller enqueued: o itself, or the
// custom operation a frozen o stands for.
func (o *Operation) original() IOperation {
	if o.frozen {
		return o.payload.(IOperation)
	}
	return o
}

// thaw replaces, in ops, each frozen operation by the caller's own, before
// the batch is handed to its watcher.
func thaw(ops []IOperation) {
	for i, op := range ops {
		if o, ok := op.(*Operation); ok {
			ops[i] = o.original()
		}
	}
}

// ActualCoster is implemented by an operation that can tell, once its
// batch's callback has returned, what it really cost; *Operation implements
// it through SetActualCost. The batcher asks after every callback: the
// credit is then charged the difference between the actual and the
// estimated cost (Cost()), or refunded it, so the rate the datastore sees is
// the capacity however wrong the estimates; and the target it asks the rate
// limiter for is scaled by the ratio of actual to estimated cost observed
// lately. An operation that reports nothing (ok false) is settled at its
// estimate, exactly as before.
type ActualCoster interface {
	ActualCost() (cost uint32, ok bool)
}

const actualKnown = 1 << 32

// SetActualCost records what the operation really cost, for example the
// request charge a datastore returned for it. Call it from the watcher's
// callback, before it returns; the batcher reads it once the callback has
// returned and clears it for the next attempt. For a batch whose cost is
// known only as a whole, set it on one operation and 0 on the others. It is
// safe for concurrent use.
func (o *Operation) SetActualCost(cost uint32) {
	o.actual.Store(actualKnown | uint64(cost))
}

// ActualCost returns the cost set by SetActualCost and true, or 0 and false
// when none was set since the batcher last settled the operation.
func (o *Operation) ActualCost() (uint32, bool) {
	v := o.actual.Load()
	return uint32(v), v&actualKnown != 0
}
