//go:build unix

package prometheus_test

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time, user plus system, that this process has
// used so far. Unlike wall time it does not grow when other processes on a
// shared machine take the cores, so it shows the metrics' cost more
// steadily.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
