package batcher

// HandoverHeld reports whether the loop has told the hand-over that it
// leaves the operations there until it is unblocked (see handover.hold),
// with some held. For tests of package batcher_test.
func (b *Batcher) HandoverHeld() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.incoming.stale && b.incoming.len() > 0
}
