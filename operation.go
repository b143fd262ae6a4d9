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

// frozenOp is a custom IOperation as Enqueue read it: its watcher, cost and
// batchability are taken once, when it is accepted, and the loop uses those
// values only, so that an operation whose methods answer differently later
// (a nil watcher, a lower cost) can neither crash the loop nor leave its
// cost in the target. The watcher is handed the operation itself, never
// this wrapper. Operations made by NewOperation cannot change and are not
// wrapped, so they cost no allocation.
type frozenOp struct {
	IOperation
	watcher   IWatcher
	cost      uint32
	batchable bool
}

func (f *frozenOp) Watcher() IWatcher { return f.watcher }
func (f *frozenOp) Cost() uint32      { return f.cost }
func (f *frozenOp) IsBatchable() bool { return f.batchable }

// freeze returns op as Enqueue accepts it: a custom operation wrapped with
// the values it gives now; nil and *Operation unchanged.
func freeze(op IOperation) IOperation {
	switch op.(type) {
	case nil, *Operation, *frozenOp:
		return op
	}
	return &frozenOp{IOperation: op, watcher: op.Watcher(), cost: op.Cost(), batchable: op.IsBatchable()}
}

// thaw replaces, in ops, each frozen operation by the caller's own, before
// the batch is handed to its watcher.
func thaw(ops []IOperation) {
	for i, op := range ops {
		if f, ok := op.(*frozenOp); ok {
			ops[i] = f.IOperation
		}
	}
}
