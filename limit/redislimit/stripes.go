package redislimit

import (
	"sync/atomic"
	"unsafe"
)

// stripeBits sets how many lines a stripes counter spreads over.
const stripeBits = 5

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
	// A goroutine's stack is at least 8 KiB, aligned to its size: its
	// address over 8 KiB tells the goroutines apart. It only picks the
	// line, so a stack that moved (grown) merely picks another.
	g := uint64(uintptr(unsafe.Pointer(&here)) >> 13)
	s[g*0x9e3779b97f4a7c15>>(64-stripeBits)].n.Add(n)
}

// load returns the sum of s.
func (s *stripes) load() (n int64) {
	for i := range s {
		n += s[i].n.Load()
	}
	return n
}
