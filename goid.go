package batcher

import (
	"bytes"
	"runtime"
	"strconv"
)

// goid returns the id of the calling goroutine. The batcher needs it in one
// place only: Stop, Shutdown and a blocking Enqueue called from a listener run
// on the loop goroutine itself, and waiting there for the loop would wait
// forever. It is only called on those rare paths, never per operation.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, _ := strconv.ParseUint(string(b), 10, 64)
	return id
}
