package redislimit

import (
	"sync/atomic"
	"unsafe"
)

// stripeBits sets how many lines a stripes counter spreads over.
const stripeBits = 6

// stackBlockShift is log2 of the smallest goroutine stack, 2 KiB: every
// stack is a multiple of it and starts on a multiple of it, so two
// goroutines' stacks never share a block of that size.
const stackBlockShift = 11

// stripes is a counter spread over cache lines. An add writes the line
// picked by the calling goroutine's stack, so that goroutines running at
// once on two processors mostly write different lines, and a goroutine
// writes the same line from one call to the next: the counts a decision
// makes move no line between processors. A load sums the lines.
type stripes [1 << stripeBits]struct {
	n atomic.Int64
	_ [56]byte
}

// add adds n to s.
func (s *stripes) add(n int64) {
	var here byte
	s[stripeOf(stackBlock(unsafe.Pointer(&here)))].n.Add(n)
}

// stackBlock is the 2-KiB block of the stack that holds p, a local
// variable of the calling goroutine: no two live goroutines share one. (A
// block of 8 KiB, used before, was shared by up to four goroutines with
// the smallest stacks, which then wrote one line from two processors.)
func stackBlock(p unsafe.Pointer) uint64 { return uint64(uintptr(p) >> stackBlockShift) }

// stripeOf picks the stripe of a stack block: Fibonacci hashing, which
// spreads blocks near each other over different stripes. It only picks
// the line, so a stack that moved (grown) merely picks another.
func stripeOf(block uint64) uint64 { return block * 0x9e3779b97f4a7c15 >> (64 - stripeBits) }

// load returns the sum of s.
func (s *stripes) load() (n int64) {
	for i := range s {
		n += s[i].n.Load()
	}
	return n
}
