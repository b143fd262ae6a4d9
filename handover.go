package batcher

// handover is the queue between Enqueue and the loop: a ring of operations
// accepted and not yet taken into batches. It is allocated when the batcher
// is made, with a slot for every operation the buffer may hold (up to
// handoverPrealloc), so Enqueue never allocates: before Start, at capacity
// 0, or with the loop behind. A slot is one pointer, 8 bytes, which is all
// the memory a buffered operation takes while it waits here: Enqueue turns
// every operation into an *Operation (see freeze), so the ring needs no
// interface values, which take 16 bytes each. The loop leaves operations
// here while it cannot release what it already holds (see loop.intake), so
// a backlog costs no more than that.
//
// The ring never holds more than the buffer size, since Enqueue reserves a
// place in the buffer before it pushes. Every method requires the Batcher's
// mu.
type handover struct {
	buf  []*Operation
	head int // index of the oldest operation
	n    int // operations held
}

// handoverPrealloc bounds the slots allocated up front (8 MiB): a larger
// buffer grows the ring by doubling when it fills, the only case in which
// Enqueue allocates.
const handoverPrealloc = 1 << 20

func newHandover(size uint32) handover {
	return handover{buf: make([]*Operation, min(int64(size), handoverPrealloc))}
}

// push appends op and reports whether the ring was empty.
func (h *handover) push(op *Operation) (wasEmpty bool) {
	if h.n == len(h.buf) {
		h.grow()
	}
	i := h.head + h.n
	if i >= len(h.buf) {
		i -= len(h.buf)
	}
	h.buf[i] = op
	h.n++
	return h.n == 1
}

// grow doubles the ring, keeping the order of what it holds.
func (h *handover) grow() {
	next := make([]*Operation, max(2*len(h.buf), 16))
	k := copy(next, h.buf[h.head:])
	copy(next[k:], h.buf[:h.head])
	h.buf, h.head = next, 0
}

// take moves up to len(dst) of the oldest operations into dst, clearing
// their slots, and returns how many it moved.
func (h *handover) take(dst []*Operation) int {
	k := 0
	for k < len(dst) && h.n > 0 {
		end := min(h.head+h.n, len(h.buf), h.head+len(dst)-k)
		c := copy(dst[k:], h.buf[h.head:end])
		clear(h.buf[h.head:end])
		k += c
		h.head += c
		h.n -= c
		if h.head == len(h.buf) {
			h.head = 0
		}
	}
	return k
}

// len returns how many operations the ring holds.
func (h *handover) len() int { return h.n }
