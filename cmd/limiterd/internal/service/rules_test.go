package service

import (
	"fmt"
	"io/fs"
	"syscall"
	"testing"
)

// TestReadFailureIgnoresTheCall: a rule directory removed while a poll
// reads it fails a read of its entries, and the next poll's open of it:
// one failure, reported once. A failure on another path, or for another
// reason, is a new one.
func TestReadFailureIgnoresTheCall(t *testing.T) {
	wrap := func(op, path string, err error) error {
		return fmt.Errorf("envoyrl: %s: %w", path, &fs.PathError{Op: op, Path: path, Err: err})
	}
	a := readFailure(wrap("readdirent", "/r", syscall.ENOENT))
	if b := readFailure(wrap("open", "/r", syscall.ENOENT)); a != b {
		t.Fatalf("%q and %q: the same failure, told apart", a, b)
	}
	for _, other := range []error{
		wrap("open", "/r/broken.yaml", syscall.ENOENT),
		wrap("open", "/r", syscall.EACCES),
	} {
		if b := readFailure(other); a == b {
			t.Fatalf("%q: a new failure taken for %q", b, a)
		}
	}
}
