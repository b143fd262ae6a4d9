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
// With a BatchObserver set, a second ring beside it holds when Enqueue
// accepted each operation (8 more bytes a slot), so that the wait reported
// for a batch runs from Enqueue, also for operations the loop left here
// while it was blocked. A stamp costs a reading of the clock only when the
// ring is empty or stale: otherwise the loop is about to take what the ring
// holds, and the operation gets the latest reading the ring knows (its own
// on the push that made the ring non-empty, or the loop's at its last take),
// which is at most one pass of the loop old. The ring is stale before the
// loop first takes from it and while the loop leaves operations here
// because it is blocked; then every push reads the clock.
//
// The ring never holds more than the buffer size, since Enqueue reserves a
// place in the buffer before it pushes. Every method requires the Batcher's
// mu.
type handover struct {
	buf    []*Operation
	at     []int64 // when each was accepted, in ns after the stamps' epoch; nil when not stamping
	lastAt int64   // the latest reading of the clock the ring knows, as a stamp
	stale  bool    // the loop is not taking what the ring holds
	head   int     // index of the oldest operation
	n      int     // operations held
}

// handoverPrealloc bounds the slots allocated up front (8 MiB): a larger
// buffer grows the ring by doubling when it fills, the only case in which
// Enqueue allocates.
const handoverPrealloc = 1 << 20

func newHandover(size uint32) handover {
	return handover{buf: make([]*Operation, min(int64(size), handoverPrealloc)), stale: true}
}

// needsClock reports whether the next push must be given a reading of the
// clock (see push).
func (h *handover) needsClock() bool { return h.at != nil && (h.n == 0 || h.stale) }

// push appends op and reports whether the ring was empty. When stamping, op
// is stamped now if needsClock said so (now is ignored otherwise), or else
// with the latest reading the ring knows.
func (h *handover) push(op *Operation, now int64) (wasEmpty bool) {
	if h.n == len(h.buf) {
		h.grow()
	}
	i := h.head + h.n
	if i >= len(h.buf) {
		i -= len(h.buf)
	}
	h.buf[i] = op
	if h.at != nil {
		if h.needsClock() {
			h.lastAt = max(h.lastAt, now)
		}
		h.at[i] = h.lastAt
	}
	h.n++
	return h.n == 1
}

// grow doubles the ring, keeping the order of what it holds.
func (h *handover) grow() {
	size := max(2*len(h.buf), 16)
	next := make([]*Operation, size)
	k := copy(next, h.buf[h.head:])
	copy(next[k:], h.buf[:h.head])
	if h.at != nil {
		at := make([]int64, size)
		copy(at[copy(at, h.at[h.head:]):], h.at[:h.head])
		h.at = at
	}
	h.buf, h.head = next, 0
}

// stamp starts or stops recording when operations are accepted, with at
// as the latest reading of the clock. Starting, it gives every operation
// already held the stamp at, the earliest the ring can still tell.
func (h *handover) stamp(on bool, at int64) {
	if !on {
		h.at = nil
		return
	}
	if len(h.at) != len(h.buf) {
		h.at = make([]int64, len(h.buf))
	}
	h.lastAt = at
	for k, i := 0, h.head; k < h.n; k++ {
		h.at[i] = at
		if i++; i == len(h.buf) {
			i = 0
		}
	}
}

// take moves up to len(dst) of the oldest operations into dst, clearing
// their slots, and returns how many it moved. When stamping, their stamps
// go to dstAt, which is at least as long as dst, and now, the loop's reading
// of the clock made before the take, becomes the one that later pushes get.
// The ring is no longer stale.
func (h *handover) take(dst []*Operation, dstAt []int64, now int64) int {
	h.stale = false
	if h.at != nil {
		h.lastAt = max(h.lastAt, now)
	}
	k := 0
	for k < len(dst) && h.n > 0 {
		end := min(h.head+h.n, len(h.buf), h.head+len(dst)-k)
		c := copy(dst[k:], h.buf[h.head:end])
		clear(h.buf[h.head:end])
		if h.at != nil {
			copy(dstAt[k:], h.at[h.head:end])
		}
		k += c
		h.head += c
		h.n -= c
		if h.head == len(h.buf) {
			h.head = 0
		}
	}
	return k
}

// stamping reports whether the ring records when operations are accepted.
func (h *handover) stamping() bool { return h.at != nil }

// hold marks the ring stale: the loop leaves what it holds, for now.
func (h *handover) hold() { h.stale = true }

// len returns how many operations the ring holds.
func (h *handover) len() int { return h.n }
